"""NVIDIA GPU readings through NVML (``pynvml`` from the nvidia-ml-py package).

One wrapper, :class:`NvmlReader`, that never raises: every failing NVML call becomes
``None`` in the readout, and a failed ``nvmlInit`` becomes a plain-words
``unavailable_reason``.  ``pynvml`` is imported lazily on the first read.  A failed
``nvmlInit`` (driver not loaded yet) or a failing device count (a GPU reset) is retried at
most every ``retry_s`` seconds, shutting NVML down first, so GPUs come back without a restart.

Traps handled (REFERENCE.md §6):
- ``NVMLLibraryMismatchError`` is *not* an ``NVMLError``; the unversioned process
  calls raise it on drivers without the ``_v3`` symbol, so we fall back to ``_v2``.
- ``usedGpuMemory`` is ``None`` on WDDM.
- nvidia-ml-py 13.x returns ``str`` from its string calls (``@convertStrBytes``, including
  ``nvmlSystemGetProcessName``); older bindings return bytes, so both are accepted.
- ``nvmlDeviceGetTemperature`` is deprecated: ``nvmlDeviceGetTemperatureV`` is tried first,
  the old call only where the binding or the driver lacks it (AttributeError / FunctionNotFound).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from app.core.monitor.snapshot import GpuProcess, GpuReading, GpuReadout

__all__ = ["GpuProcess", "GpuReading", "GpuReadout", "NvmlReader"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# NVML error codes (pynvml NVML_ERROR_*), used to word the unavailable reason.
_ERR_NO_PERMISSION = 4
_ERR_DRIVER_NOT_LOADED = 9
_ERR_LIBRARY_NOT_FOUND = 12
_ERR_FUNCTION_NOT_FOUND = 13
_ERR_LIB_RM_VERSION_MISMATCH = 18

RETRY_S = 30.0  # how often a failed start (or a lost device list) is retried

_INIT_REASONS = {
    _ERR_LIBRARY_NOT_FOUND: (
        "No NVIDIA driver found (NVML library not found). Install the NVIDIA driver to see GPU readings."
    ),
    _ERR_DRIVER_NOT_LOADED: (
        "The NVIDIA driver is not loaded (NVML: Driver Not Loaded). Load the driver or reboot to see GPU readings."
    ),
    _ERR_LIB_RM_VERSION_MISMATCH: (
        "The NVIDIA driver and its NVML library have different versions. "
        "Reboot after the driver update to see GPU readings."
    ),
    _ERR_NO_PERMISSION: (
        "No permission to query the NVIDIA driver (NVML: Insufficient Permissions). "
        "Check the access rights of /dev/nvidia*."
    ),
}


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _int(value: object) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def _init_reason(exc: BaseException) -> str:
    code = getattr(exc, "value", None)
    if isinstance(code, int) and code in _INIT_REASONS:
        return _INIT_REASONS[code]
    return f"NVML could not start ({exc}). GPU readings are unavailable."


class NvmlReader:
    """Reads every NVIDIA GPU through NVML; safe to call from any one thread at a time.

    ``module`` is the ``pynvml`` module to use (tests pass a fake); None imports
    ``pynvml`` on the first :meth:`read`. A failed start is retried at most every ``retry_s``
    seconds of ``clock``.
    """

    def __init__(
        self, module: Any | None = None, *, retry_s: float = RETRY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._module = module
        self._lock = threading.Lock()
        self._started = False
        self._failure: str | None = None
        self._failed_at = 0.0
        self._retry_s = retry_s
        self._clock = clock
        self._missing_package = False
        self._temperature_v = True  # until the binding or the driver turns out to lack it
        self._names: dict[int, str | None] = {}

    # -- public API ---------------------------------------------------------------

    def read(self) -> GpuReadout:
        """Return a readout of every GPU; never raises."""
        with self._lock:
            try:
                return self._read_locked()
            except Exception as exc:  # a defect in a binding must not reach the UI
                log.warning("NVML read failed: %s", exc)
                return GpuReadout((), f"GPU readings failed ({exc}).", None, None)

    def close(self) -> None:
        """Shut NVML down if this reader started it; safe to call twice."""
        with self._lock:
            if self._started and self._module is not None:
                self._call(self._module.nvmlShutdown)
            self._started = False
            self._failure = None
            self._names.clear()

    # -- internals ----------------------------------------------------------------

    def _start(self) -> str | None:
        """Import and initialise NVML; return the reason it is unavailable. A failure is remembered for
        ``retry_s`` (no retry storm at 2 Hz), then init is tried again; a missing package is final."""
        if self._started:
            return None
        if self._failure is not None and (self._missing_package or self._clock() - self._failed_at < self._retry_s):
            return self._failure
        if self._module is None:
            try:
                import pynvml  # lazy: heavy-ish and absent on some installs
            except ImportError:
                self._missing_package = True
                self._failure = "GPU readings need the nvidia-ml-py package (pip install nvidia-ml-py)."
                return self._failure
            self._module = pynvml
        try:
            self._module.nvmlInit()
        except Exception as exc:  # NVMLError_* or OSError from the loader
            return self._fail(_init_reason(exc))
        self._started, self._failure = True, None
        return None

    def _fail(self, reason: str) -> str:
        self._failure, self._failed_at = reason, self._clock()
        return reason

    def _restart_later(self, reason: str) -> str:
        """The driver lost its GPUs (a reset, a reload): shut NVML down; init is retried after ``retry_s``."""
        if self._module is not None:
            self._call(self._module.nvmlShutdown)
        self._started = False
        self._names.clear()
        return self._fail(reason)

    def _call(self, fn: Callable[..., T], *args: Any) -> T | None:
        """Call one NVML function; any failure (NVMLError*, mismatch, …) becomes None."""
        try:
            return fn(*args)
        except Exception as exc:
            log.debug("NVML %s failed: %s", getattr(fn, "__name__", fn), exc)
            return None

    def _fn(self, name: str) -> Callable[..., Any] | None:
        return getattr(self._module, name, None)

    def _get(self, name: str, *args: Any) -> Any:
        fn = self._fn(name)
        return None if fn is None else self._call(fn, *args)

    def _read_locked(self) -> GpuReadout:
        reason = self._start()
        if reason is not None:
            return GpuReadout((), reason, None, None)
        driver = _text(self._get("nvmlSystemGetDriverVersion"))
        cuda = _int(self._get("nvmlSystemGetCudaDriverVersion"))
        count = _int(self._get("nvmlDeviceGetCount"))
        if count is None:
            reason = (
                "The NVIDIA driver did not report its GPUs (NVML device count failed); "
                f"retrying every {self._retry_s:g} s."
            )
            return GpuReadout((), self._restart_later(reason), driver, cuda)
        if count == 0:
            reason = "The NVIDIA driver is loaded but reports no GPUs."
            return GpuReadout((), reason, driver, cuda)
        gpus = tuple(self._read_gpu(i) for i in range(count))
        self._forget_gone_pids(gpus)
        return GpuReadout(gpus, None, driver, cuda)

    def _read_gpu(self, index: int) -> GpuReading:
        handle = self._get("nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            return GpuReading(index, f"GPU {index}", None, None, None, None, None, None, None, None, None, None, ())
        m = self._module
        memory = self._get("nvmlDeviceGetMemoryInfo", handle)
        util = self._get("nvmlDeviceGetUtilizationRates", handle)
        limit = self._get("nvmlDeviceGetEnforcedPowerLimit", handle)
        if limit is None:
            limit = self._get("nvmlDeviceGetPowerManagementLimit", handle)
        return GpuReading(
            index=index,
            name=_text(self._get("nvmlDeviceGetName", handle)) or f"GPU {index}",
            uuid=_text(self._get("nvmlDeviceGetUUID", handle)),
            memory_total_bytes=_int(getattr(memory, "total", None)),
            memory_used_bytes=_int(getattr(memory, "used", None)),
            memory_free_bytes=_int(getattr(memory, "free", None)),
            utilization_percent=_int(getattr(util, "gpu", None)),
            temperature_c=self._temperature(handle),
            power_mw=_int(self._get("nvmlDeviceGetPowerUsage", handle)),
            power_limit_mw=_int(limit),
            clock_sm_mhz=_int(self._get("nvmlDeviceGetClockInfo", handle, getattr(m, "NVML_CLOCK_SM", 1))),
            clock_memory_mhz=_int(self._get("nvmlDeviceGetClockInfo", handle, getattr(m, "NVML_CLOCK_MEM", 2))),
            processes=self._read_processes(handle),
        )

    def _temperature(self, handle: Any) -> int | None:
        """GPU temperature: ``nvmlDeviceGetTemperatureV``, else the deprecated call where V is missing."""
        sensor = getattr(self._module, "NVML_TEMPERATURE_GPU", 0)
        fn = self._fn("nvmlDeviceGetTemperatureV") if self._temperature_v else None
        if fn is not None:
            try:
                return _int(fn(handle, sensor))
            except Exception as exc:
                if getattr(exc, "value", None) != _ERR_FUNCTION_NOT_FOUND:  # NotSupported etc.: no reading
                    log.debug("NVML nvmlDeviceGetTemperatureV failed: %s", exc)
                    return None
        self._temperature_v = False  # the binding or the driver lacks V: use the old call from now on
        return _int(self._get("nvmlDeviceGetTemperature", handle, sensor))

    def _process_list(self, kind: str, handle: Any) -> list[Any]:
        """``nvmlDevice<kind>RunningProcesses``, falling back to ``_v2`` on a version mismatch."""
        fn = self._fn(f"nvmlDeviceGet{kind}RunningProcesses")
        if fn is None:
            return []
        try:
            return list(fn(handle) or [])
        except Exception as exc:
            mismatch = getattr(self._module, "NVMLLibraryMismatchError", None)
            if not (isinstance(mismatch, type) and isinstance(exc, mismatch)):
                log.debug("NVML %s processes failed: %s", kind, exc)
                return []
        older = self._fn(f"nvmlDeviceGet{kind}RunningProcesses_v2")
        result = None if older is None else self._call(older, handle)
        return list(result or [])

    def _read_processes(self, handle: Any) -> tuple[GpuProcess, ...]:
        used_by_pid: dict[int, int | None] = {}
        for kind in ("Compute", "Graphics"):
            for proc in self._process_list(kind, handle):
                pid = _int(getattr(proc, "pid", None))
                if pid is None:
                    continue
                used = _int(getattr(proc, "usedGpuMemory", None))
                known = used_by_pid.get(pid)
                # A process in both lists shares one context: keep the larger figure.
                if pid not in used_by_pid or (used is not None and (known or 0) < used):
                    used_by_pid[pid] = used
        return tuple(GpuProcess(pid, self._process_name(pid), used) for pid, used in sorted(used_by_pid.items()))

    def _process_name(self, pid: int) -> str | None:
        if pid in self._names:
            return self._names[pid]
        name = _text(self._get("nvmlSystemGetProcessName", pid)) or _psutil_name(pid)
        self._names[pid] = name
        return name

    def _forget_gone_pids(self, gpus: tuple[GpuReading, ...]) -> None:
        alive = {p.pid for g in gpus for p in g.processes}
        for pid in [pid for pid in self._names if pid not in alive]:
            del self._names[pid]


def _psutil_name(pid: int) -> str | None:
    try:
        import psutil

        return str(psutil.Process(pid).name())
    except Exception:  # gone, another namespace (host PIDs in containers), no access
        return None
