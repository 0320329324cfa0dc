"""A fake ``pynvml`` module for machines without an NVIDIA GPU.

It follows nvidia-ml-py 13.x behaviour (REFERENCE.md §6) and reuses the real module's
exception classes, so ``NVMLError(12)`` is an ``NVMLError_LibraryNotFound`` and
``NVMLLibraryMismatchError`` is a plain ``Exception`` exactly as in the library:

- ``nvmlInit`` can fail with LibraryNotFound (12) or DriverNotLoaded (9);
- any call before a successful init raises ``NVMLError_Uninitialized``;
- each per-device call can be marked NotSupported;
- ``usedGpuMemory`` can be None (the WDDM case);
- the unversioned process calls raise ``NVMLLibraryMismatchError`` when the driver lacks
  ``_v3``, while the ``_v2`` calls work;
- strings are ``str`` (13.x decorates its string calls with ``@convertStrBytes``); ``bytes_names=True``
  returns bytes instead, as old bindings did;
- temperature comes from ``nvmlDeviceGetTemperatureV`` and the deprecated ``nvmlDeviceGetTemperature``;
  ``has_temperature_v=False`` makes the V call raise FunctionNotFound (a driver older than the symbol);
- ``device_count_error`` makes ``nvmlDeviceGetCount`` fail (a GPU reset, a driver reload) until it is cleared.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml as _real

NVML_ERROR_UNINITIALIZED = _real.NVML_ERROR_UNINITIALIZED
NVML_ERROR_NOT_SUPPORTED = _real.NVML_ERROR_NOT_SUPPORTED
NVML_ERROR_NOT_FOUND = _real.NVML_ERROR_NOT_FOUND
NVML_ERROR_DRIVER_NOT_LOADED = _real.NVML_ERROR_DRIVER_NOT_LOADED
NVML_ERROR_LIBRARY_NOT_FOUND = _real.NVML_ERROR_LIBRARY_NOT_FOUND
NVML_ERROR_INVALID_ARGUMENT = _real.NVML_ERROR_INVALID_ARGUMENT


@dataclass
class FakeGpu:
    name: str = "NVIDIA H200"
    uuid: str = "GPU-00000000-1111-2222-3333-444444444444"
    total_bytes: int = 143_771_369_472
    used_bytes: int = 1_073_741_824
    utilization_percent: int = 7
    temperature_c: int = 31
    power_mw: int = 74_000
    power_limit_mw: int = 700_000
    clock_sm_mhz: int = 1_980
    clock_memory_mhz: int = 3_201
    compute: list[tuple[int, int | None]] = field(default_factory=list)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    # nvml function names that raise NVMLError_NotSupported for this GPU
    unsupported: set[str] = field(default_factory=set)


class FakePynvml:
    """Stands in for the ``pynvml`` module; pass it to ``NvmlReader(module=...)``."""

    NVMLError = _real.NVMLError
    NVMLLibraryMismatchError = _real.NVMLLibraryMismatchError
    NVMLError_Uninitialized = _real.NVMLError_Uninitialized
    NVMLError_NotSupported = _real.NVMLError_NotSupported
    NVMLError_LibraryNotFound = _real.NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = _real.NVMLError_DriverNotLoaded
    NVMLError_FunctionNotFound = _real.NVMLError_FunctionNotFound
    NVML_TEMPERATURE_GPU = _real.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = _real.NVML_CLOCK_SM
    NVML_CLOCK_MEM = _real.NVML_CLOCK_MEM

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        init_error: int | None = None,
        has_v3: bool = True,
        has_temperature_v: bool = True,
        bytes_names: bool = False,
        driver_version: str = "560.35.03",
        cuda_driver_version: int = 12060,
        process_names: dict[int, str] | None = None,
    ) -> None:
        self.gpus = list(gpus or [])
        self.init_error = init_error
        self.has_v3 = has_v3
        self.has_temperature_v = has_temperature_v
        self.device_count_error: int | None = None
        self.bytes_names = bytes_names
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.process_names = dict(process_names or {})
        self.init_count = 0
        self.shutdown_count = 0
        self.calls: deque[str] = deque(maxlen=2_000)  # the latest calls, bounded for long runs

    # -- life cycle ---------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise _real.NVMLError(self.init_error)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._check_init("nvmlShutdown")
        self.init_count -= 1
        self.shutdown_count += 1

    # -- helpers --------------------------------------------------------------------

    def _check_init(self, fn: str) -> None:
        self.calls.append(fn)
        if self.init_count <= 0:
            raise _real.NVMLError(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, fn: str, handle: Any) -> FakeGpu:
        self._check_init(fn)
        if not isinstance(handle, SimpleNamespace) or handle.index >= len(self.gpus):
            raise _real.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.index]
        if fn in gpu.unsupported:
            raise _real.NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _str(self, value: str) -> str | bytes:
        return value.encode() if self.bytes_names else value

    @staticmethod
    def _procs(pairs: list[tuple[int, int | None]]) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
            for pid, used in pairs
        ]

    # -- system ---------------------------------------------------------------------

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._check_init("nvmlSystemGetDriverVersion")
        return self._str(self.driver_version)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check_init("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlSystemGetProcessName(self, pid: int) -> str | bytes:
        self._check_init("nvmlSystemGetProcessName")
        if pid not in self.process_names:
            raise _real.NVMLError(NVML_ERROR_NOT_FOUND)
        return self._str(self.process_names[pid])  # str in 13.x (@convertStrBytes)

    def nvmlDeviceGetCount(self) -> int:
        self._check_init("nvmlDeviceGetCount")
        if self.device_count_error is not None:
            raise _real.NVMLError(self.device_count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimpleNamespace:
        self._check_init("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise _real.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return SimpleNamespace(index=index)

    # -- device -------------------------------------------------------------------

    def nvmlDeviceGetName(self, h: Any) -> str | bytes:
        return self._str(self._gpu("nvmlDeviceGetName", h).name)

    def nvmlDeviceGetUUID(self, h: Any) -> str | bytes:
        return self._str(self._gpu("nvmlDeviceGetUUID", h).uuid)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> SimpleNamespace:
        g = self._gpu("nvmlDeviceGetMemoryInfo", h)
        return SimpleNamespace(total=g.total_bytes, used=g.used_bytes, free=g.total_bytes - g.used_bytes)

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> SimpleNamespace:
        g = self._gpu("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=g.utilization_percent, memory=g.utilization_percent // 2)

    def nvmlDeviceGetTemperatureV(self, h: Any, sensor: int, version: int = _real.nvmlTemperature_v1) -> int:
        if not self.has_temperature_v:  # what _nvmlGetFunctionPointer raises for a missing symbol
            self.calls.append("nvmlDeviceGetTemperatureV")
            raise _real.NVMLError(_real.NVML_ERROR_FUNCTION_NOT_FOUND)
        g = self._gpu("nvmlDeviceGetTemperatureV", h)
        if sensor != self.NVML_TEMPERATURE_GPU or version != _real.nvmlTemperature_v1:
            raise _real.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return g.temperature_c

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:  # deprecated in 13.x
        g = self._gpu("nvmlDeviceGetTemperature", h)
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise _real.NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return g.temperature_c

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", h).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", h).power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetPowerManagementLimit", h).power_limit_mw

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:
        g = self._gpu("nvmlDeviceGetClockInfo", h)
        if clock == self.NVML_CLOCK_SM:
            return g.clock_sm_mhz
        if clock == self.NVML_CLOCK_MEM:
            return g.clock_memory_mhz
        raise _real.NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[SimpleNamespace]:
        g = self._gpu("nvmlDeviceGetComputeRunningProcesses", h)
        if not self.has_v3:  # what @throwOnVersionMismatch raises on FunctionNotFound
            raise _real.NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML "
                "lib version. Either use matching pyNVML and NVML lib versions or use a "
                "versioned function such as nvmlDeviceGetComputeRunningProcesses_v2"
            )
        return self._procs(g.compute)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: Any) -> list[SimpleNamespace]:
        return self._procs(self._gpu("nvmlDeviceGetComputeRunningProcesses_v2", h).compute)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Any) -> list[SimpleNamespace]:
        g = self._gpu("nvmlDeviceGetGraphicsRunningProcesses", h)
        if not self.has_v3:
            raise _real.NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML "
                "lib version. Either use matching pyNVML and NVML lib versions or use a "
                "versioned function such as nvmlDeviceGetGraphicsRunningProcesses_v2"
            )
        return self._procs(g.graphics)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, h: Any) -> list[SimpleNamespace]:
        return self._procs(self._gpu("nvmlDeviceGetGraphicsRunningProcesses_v2", h).graphics)
