"""NvmlReader against a fake pynvml that behaves like nvidia-ml-py (tests/support/fake_pynvml.py)."""

from __future__ import annotations

import os

import pynvml
import pytest

from app.services.monitor.nvml import GpuProcess, GpuReadout, NvmlReader
from tests.support.fake_pynvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    FakeGpu,
    FakePynvml,
)


def test_full_reading_of_two_gpus() -> None:
    fake = FakePynvml(
        [FakeGpu(compute=[(4242, 2_000_000_000)]), FakeGpu(name="NVIDIA L4", used_bytes=0)],
        process_names={4242: "/usr/bin/python3"},
    )
    readout = NvmlReader(fake).read()
    assert readout.unavailable_reason is None
    assert readout.driver_version == "560.35.03"
    assert readout.cuda_driver_version == 12060
    first, second = readout.gpus
    assert (first.index, first.name, second.name) == (0, "NVIDIA H200", "NVIDIA L4")
    assert first.memory_total_bytes == 143_771_369_472
    assert first.memory_used_bytes == 1_073_741_824
    assert first.memory_free_bytes == 143_771_369_472 - 1_073_741_824
    assert (first.utilization_percent, first.temperature_c) == (7, 31)
    assert (first.power_mw, first.power_limit_mw) == (74_000, 700_000)
    assert (first.clock_sm_mhz, first.clock_memory_mhz) == (1_980, 3_201)
    assert first.processes == (GpuProcess(4242, "/usr/bin/python3", 2_000_000_000),)
    assert second.processes == ()


def test_library_not_found_at_init_gives_plain_reason() -> None:
    fake = FakePynvml([FakeGpu()], init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    readout = NvmlReader(fake).read()
    assert readout.gpus == ()
    assert readout.unavailable_reason is not None
    assert readout.unavailable_reason.startswith("No NVIDIA driver found (NVML library not found)")
    # the failure is remembered: no retry storm at 2 Hz
    reader = NvmlReader(fake)
    reader.read()
    reader.read()
    assert fake.calls.count("nvmlInit") == 2  # once per reader


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_failed_init_is_retried_every_30_s_until_the_driver_loads() -> None:
    fake = FakePynvml([FakeGpu()], init_error=NVML_ERROR_DRIVER_NOT_LOADED)
    clock = Clock()
    reader = NvmlReader(fake, clock=clock)
    assert "driver is not loaded" in (reader.read().unavailable_reason or "")
    clock.now += 29.0
    fake.init_error = None  # the driver loads meanwhile
    assert reader.read().gpus == ()  # not retried yet: no init storm at 2 Hz
    assert fake.calls.count("nvmlInit") == 1
    clock.now += 1.5
    readout = reader.read()
    assert readout.unavailable_reason is None and readout.gpus[0].name == "NVIDIA H200"
    assert fake.calls.count("nvmlInit") == 2 and fake.init_count == 1
    reader.close()


def test_a_failing_device_count_shuts_down_and_reinits_later() -> None:
    fake = FakePynvml([FakeGpu()])
    clock = Clock()
    reader = NvmlReader(fake, clock=clock)
    assert reader.read().gpus
    fake.device_count_error = pynvml.NVML_ERROR_GPU_IS_LOST  # a GPU reset
    lost = reader.read()
    assert lost.gpus == () and "device count failed" in (lost.unavailable_reason or "")
    assert fake.shutdown_count == 1 and fake.init_count == 0
    fake.device_count_error = None
    clock.now += 10.0
    assert reader.read().gpus == () and fake.calls.count("nvmlInit") == 1  # waits out the retry time
    clock.now += 25.0
    back = reader.read()
    assert back.unavailable_reason is None and back.gpus[0].memory_used_bytes == 1_073_741_824
    assert fake.calls.count("nvmlInit") == 2 and fake.init_count == 1
    reader.close()
    assert fake.init_count == 0


def test_temperature_prefers_v_and_falls_back_to_the_old_call() -> None:
    fake = FakePynvml([FakeGpu(temperature_c=44)])
    reader = NvmlReader(fake)
    assert reader.read().gpus[0].temperature_c == 44
    assert "nvmlDeviceGetTemperatureV" in fake.calls and "nvmlDeviceGetTemperature" not in fake.calls
    old_driver = FakePynvml([FakeGpu(temperature_c=45)], has_temperature_v=False)  # FunctionNotFound
    reader = NvmlReader(old_driver)
    assert reader.read().gpus[0].temperature_c == 45
    assert reader.read().gpus[0].temperature_c == 45
    assert old_driver.calls.count("nvmlDeviceGetTemperatureV") == 1  # not retried every sample
    assert old_driver.calls.count("nvmlDeviceGetTemperature") == 2

    class OldBinding(FakePynvml):  # nvidia-ml-py before V: no such attribute
        nvmlDeviceGetTemperatureV = None  # type: ignore[assignment]

    assert NvmlReader(OldBinding([FakeGpu(temperature_c=46)])).read().gpus[0].temperature_c == 46
    unsupported = FakePynvml([FakeGpu(unsupported={"nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"})])
    assert NvmlReader(unsupported).read().gpus[0].temperature_c is None


def test_driver_not_loaded_reason() -> None:
    fake = FakePynvml([FakeGpu()], init_error=NVML_ERROR_DRIVER_NOT_LOADED)
    reason = NvmlReader(fake).read().unavailable_reason
    assert reason is not None and "driver is not loaded" in reason


def test_unknown_init_error_is_still_words() -> None:
    fake = FakePynvml([FakeGpu()], init_error=pynvml.NVML_ERROR_GPU_IS_LOST)
    reason = NvmlReader(fake).read().unavailable_reason
    assert reason is not None and "GPU is lost" in reason


def test_not_supported_fields_become_none_and_the_rest_stays() -> None:
    gpu = FakeGpu(
        unsupported={
            "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetEnforcedPowerLimit",
            "nvmlDeviceGetTemperatureV",
            "nvmlDeviceGetTemperature",
            "nvmlDeviceGetClockInfo",
        }
    )
    reading = NvmlReader(FakePynvml([gpu])).read().gpus[0]
    assert reading.power_mw is None
    assert reading.power_limit_mw == 700_000  # fell back to the management limit
    assert reading.temperature_c is None
    assert reading.clock_sm_mhz is None and reading.clock_memory_mhz is None
    assert reading.memory_used_bytes == 1_073_741_824
    assert reading.utilization_percent == 7


def test_every_device_call_unsupported_never_raises() -> None:
    calls = {n for n in dir(FakePynvml) if n.startswith("nvmlDeviceGet") and n != "nvmlDeviceGetCount"}
    calls.discard("nvmlDeviceGetHandleByIndex")
    reading = NvmlReader(FakePynvml([FakeGpu(unsupported=calls)])).read().gpus[0]
    assert reading.name == "GPU 0"
    assert reading.uuid is None and reading.memory_total_bytes is None
    assert reading.processes == ()


def test_used_gpu_memory_none_is_kept_as_none() -> None:
    fake = FakePynvml([FakeGpu(compute=[(7, None)])])
    (proc,) = NvmlReader(fake).read().gpus[0].processes
    assert proc.pid == 7 and proc.used_bytes is None


def test_library_mismatch_falls_back_to_v2() -> None:
    assert not issubclass(pynvml.NVMLLibraryMismatchError, pynvml.NVMLError)
    fake = FakePynvml(
        [FakeGpu(compute=[(11, 500)], graphics=[(12, 600)])],
        has_v3=False,
    )
    procs = NvmlReader(fake).read().gpus[0].processes
    assert [(p.pid, p.used_bytes) for p in procs] == [(11, 500), (12, 600)]
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in fake.calls
    assert "nvmlDeviceGetGraphicsRunningProcesses_v2" in fake.calls


def test_names_are_str_as_in_nvidia_ml_py_13() -> None:
    fake = FakePynvml([FakeGpu(compute=[(5, 1)])], process_names={5: "vllm"})
    fake.nvmlInit()
    assert fake.nvmlSystemGetProcessName(5) == "vllm"  # str, like the real @convertStrBytes-wrapped call
    fake.nvmlShutdown()
    assert pynvml.nvmlSystemGetProcessName.__wrapped__ is not None  # the real one is wrapped (13.x)
    readout = NvmlReader(fake).read()
    assert readout.gpus[0].processes[0].name == "vllm" and readout.driver_version == "560.35.03"


def test_bytes_names_are_decoded() -> None:
    fake = FakePynvml([FakeGpu(compute=[(5, 1)])], bytes_names=True, process_names={5: "vllm"})
    readout = NvmlReader(fake).read()
    assert readout.driver_version == "560.35.03"
    gpu = readout.gpus[0]
    assert gpu.name == "NVIDIA H200" and isinstance(gpu.name, str)
    assert gpu.uuid is not None and gpu.uuid.startswith("GPU-")
    assert gpu.processes[0].name == "vllm"


def test_process_name_falls_back_to_psutil() -> None:
    me = os.getpid()
    fake = FakePynvml([FakeGpu(compute=[(me, 10)])])  # NVML does not know the name
    proc = NvmlReader(fake).read().gpus[0].processes[0]
    assert proc.name is not None and proc.name != ""


def test_process_in_compute_and_graphics_listed_once() -> None:
    fake = FakePynvml([FakeGpu(compute=[(9, 100)], graphics=[(9, 300)])])
    procs = NvmlReader(fake).read().gpus[0].processes
    assert procs == (GpuProcess(9, None, 300),)


def test_no_gpus_reported() -> None:
    readout = NvmlReader(FakePynvml([])).read()
    assert readout.gpus == ()
    assert readout.unavailable_reason == "The NVIDIA driver is loaded but reports no GPUs."


def test_close_shuts_down_once_and_read_after_close_restarts() -> None:
    fake = FakePynvml([FakeGpu()])
    reader = NvmlReader(fake)
    reader.read()
    reader.close()
    reader.close()
    assert fake.shutdown_count == 1 and fake.init_count == 0
    assert reader.read().gpus[0].name == "NVIDIA H200"
    reader.close()


def test_broken_binding_never_raises() -> None:
    class Broken(FakePynvml):
        def nvmlDeviceGetCount(self) -> int:
            raise RuntimeError("segfault-ish")

    readout = NvmlReader(Broken([FakeGpu()])).read()
    assert isinstance(readout, GpuReadout)
    assert readout.gpus == ()
    assert readout.unavailable_reason is not None


def test_real_pynvml_on_this_machine_never_raises() -> None:
    """The real module: here (no driver) it reports why; on a GPU machine it reads GPUs."""
    reader = NvmlReader()
    readout = reader.read()
    reader.close()
    if readout.gpus:
        assert readout.unavailable_reason is None
        assert readout.gpus[0].memory_total_bytes
    else:
        assert readout.unavailable_reason
        assert "NVIDIA" in readout.unavailable_reason


@pytest.mark.parametrize("value", [b"abc", "abc"])
def test_name_types(value: object) -> None:
    from app.services.monitor.nvml import _text

    assert _text(value) == "abc"


def _gpu_check_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "scripts" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_verdict_fails_when_memory_does_not_move_or_the_process_is_missing() -> None:
    verdict = _gpu_check_module().verdict
    me, gib = os.getpid(), 1024**3
    fake = FakePynvml([FakeGpu(used_bytes=2 * gib)])
    reader = NvmlReader(fake)
    before = reader.read()
    fake.gpus[0].used_bytes, fake.gpus[0].compute = 3 * gib, [(me, gib)]
    assert verdict(before, reader.read(), gib, me) == []
    fake.gpus[0].used_bytes = 2 * gib + gib // 4  # rose by a quarter of the allocation
    (problem,) = verdict(before, reader.read(), gib, me)
    assert "less than half" in problem
    fake.gpus[0].used_bytes, fake.gpus[0].compute = 3 * gib, [(4242, gib)]  # another PID namespace, say
    (problem,) = verdict(before, reader.read(), gib, me)
    assert f"pid {me}) is missing" in problem
    fake.gpus[0].unsupported = {"nvmlDeviceGetMemoryInfo"}
    fake.gpus[0].compute = [(me, None)]
    assert verdict(before, reader.read(), gib, me) == []  # no memory reading: only the process is checked


def test_gpu_check_without_a_driver_exits_0_and_says_why() -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[2] / "scripts" / "gpu_check.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False)
    if "No NVIDIA GPU:" not in done.stdout:
        pytest.skip("this machine has an NVIDIA driver; scripts/gpu_check.py is run by hand there")
    assert done.returncode == 0, done.stderr
    assert "not a failure on a CPU machine" in done.stdout
