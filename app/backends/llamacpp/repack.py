"""Turning off llama.cpp's weight repacking (its "extra buffer types": AMX and the CPU's repacked layouts).

Some virtual machines list AMX in /proc/cpuinfo and grant the permission to use it, yet lose the tile state
across context switches: llama.cpp's AMX matrix kernels then die with SIGILL (measured on a Firecracker VM
with a Q4_K model). ``LLMW_LLAMA_NO_REPACK=1`` loads models without repacking there: slower on CPUs where it
works, but it runs. Only the worker imports this module.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

NO_REPACK_ENV = "LLMW_LLAMA_NO_REPACK"


def repacking_disabled() -> bool:
    return os.environ.get(NO_REPACK_ENV, "") not in ("", "0")


@contextlib.contextmanager
def model_params_without_repacking(enabled: bool) -> Iterator[None]:
    """While a ``Llama`` is created, its model parameters have ``use_extra_bufts`` off (when ``enabled``)."""
    if not enabled:
        yield
        return
    from llama_cpp import llama_cpp

    original = llama_cpp.llama_model_default_params

    def without_repacking() -> Any:
        params = original()
        params.use_extra_bufts = False
        return params

    llama_cpp.llama_model_default_params = without_repacking
    try:
        yield
    finally:
        llama_cpp.llama_model_default_params = original
