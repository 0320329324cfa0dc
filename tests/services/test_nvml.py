"""NvmlReader against a fake pynvml that behaves like nvidia-ml-py (tests/fake_pynvml.py)."""

from __future__ import annotations

import os

import pynvml
import pytest

from app.services.nvml import GpuProcess, GpuReadout, NvmlReader
from tests.fake_pynvml import (
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
    from app.services.nvml import _text

    assert _text(value) == "abc"
