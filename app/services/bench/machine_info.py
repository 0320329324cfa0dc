"""A description of this machine for saved bench runs: GPU and driver, CPU, RAM, OS, Python, engine versions.

Blocking (it may start the vLLM interpreter to read its metadata, and ask Ollama for its version): call it off
the Qt thread. Every part that cannot be read is ``None`` rather than an error.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from app import __version__
from app.backends.http_json import response_json

if TYPE_CHECKING:
    from app.services.monitor.nvml import NvmlReader


def cpu_model() -> str | None:
    """The CPU's marketing name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def vllm_version(python: str | Path | None) -> str | None:
    """``"<distribution> <version>"`` of the vLLM in ``python`` (its own environment), read from its metadata."""
    if not python:
        return None
    from app.services.vllm.environment import VllmEnvironment

    install = VllmEnvironment(Path(python)).detect()
    return f"{install.distribution} {install.version}" if install else None


def ollama_version(host: str | None) -> str | None:
    """Ollama's ``/api/version`` at ``host``; None when it does not answer within 2 s."""
    if not host:
        return None
    import httpx

    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):  # ValueError: JsonError too
        response = httpx.get(f"{host.rstrip('/')}/api/version", timeout=2.0, trust_env=False)
        return str(response_json(response, what="Ollama's version")["version"]) if response.status_code == 200 else None
    return None


def gpu_description(nvml: NvmlReader | None) -> dict[str, Any]:
    """GPUs (name, total memory) and the driver from NVML, or the reason there are none."""
    if nvml is None:
        from app.services.monitor.nvml import NvmlReader

        reader = NvmlReader()
        try:
            readout = reader.read()
        finally:
            reader.close()
    else:
        readout = nvml.read()
    return {
        "gpus": [{"index": g.index, "name": g.name, "memory_total_bytes": g.memory_total_bytes} for g in readout.gpus],
        "gpu_unavailable_reason": readout.unavailable_reason,
        "driver_version": readout.driver_version,
        "cuda_driver_version": readout.cuda_driver_version,
    }


def describe_machine(
    *, vllm_python: str | Path | None = None, ollama_host: str | None = None, nvml: NvmlReader | None = None
) -> dict[str, Any]:
    """The machine description stored with every bench run."""
    memory = psutil.virtual_memory()
    return {
        "hostname": platform.node(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_model": cpu_model(),
        "cpu_cores_physical": psutil.cpu_count(logical=False),
        "cpu_threads": os.cpu_count(),
        "ram_total_bytes": memory.total,
        **gpu_description(nvml),
        "app_version": __version__,
        "llama_cpp_python": package_version("llama_cpp_python"),
        "vllm": vllm_version(vllm_python),
        "ollama": ollama_version(ollama_host),
    }
