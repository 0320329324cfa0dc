"""Whether llama.cpp uses Intel AMX on this machine, so the memory estimate counts its AMX weight copies.

llama.cpp compiles its AMX buffer type (``ggml-cpu/amx``) only with ``__AMX_INT8__`` and ``__AVX512VNNI__`` (a
``-march=native`` build on such a CPU, or ``GGML_AMX_INT8``), and uses it when the kernel grants the AMX tile
state (``ggml_amx_init``: ``arch_prctl(ARCH_REQ_XCOMP_PERM)``, Linux 5.16+, the kernels that list the ``amx_*``
flags). So AMX is in use when /proc/cpuinfo lists amx_int8, amx_tile and avx512_vnni, and the installed llama.cpp
CPU library defines ``ggml_backend_amx_buffer_type`` (found by name in the file, without loading it; when no
library is found, a build for this CPU is assumed). Elsewhere (no /proc/cpuinfo) the answer is no.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import mmap
import os
from collections.abc import Iterable
from pathlib import Path

from app.backends.llamacpp.repack import repacking_disabled

AMX_CPU_FLAGS = frozenset({"amx_int8", "amx_tile", "avx512_vnni"})
AMX_SYMBOL = b"ggml_backend_amx_buffer_type"  # defined only in a build with AMX kernels
_CPUINFO = Path("/proc/cpuinfo")
_CPUINFO_LINES = 200  # the first processor's flags line comes within its first few dozen lines
_LIBRARY_SUFFIXES = (".so", ".dll", ".dylib")


def cpuinfo_has_amx(lines: Iterable[str]) -> bool:
    """Whether the first ``flags`` line of /proc/cpuinfo text lists every flag llama.cpp's AMX code needs."""
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split()) >= AMX_CPU_FLAGS
    return False


def cpu_has_amx(cpuinfo: Path = _CPUINFO) -> bool:
    """The CPU check, reading ``cpuinfo`` (False when it cannot be read: not Linux)."""
    try:
        with cpuinfo.open(encoding="utf-8", errors="replace") as text:
            return cpuinfo_has_amx(itertools.islice(text, _CPUINFO_LINES))
    except OSError:
        return False


def llama_cpp_library_dir() -> Path | None:
    """Where llama-cpp-python loads its libraries from (``LLAMA_CPP_LIB_PATH`` or the package's lib/), found
    without importing it; None when it is not installed."""
    if override := os.environ.get("LLAMA_CPP_LIB_PATH"):
        return Path(override)
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def build_has_amx(library_dir: Path) -> bool | None:
    """Whether a ggml/llama library in ``library_dir`` has the AMX buffer type; None when there is none."""
    try:
        files = {p.resolve() for p in library_dir.iterdir() if _is_ggml_library(p.name)}
    except OSError:
        return None
    files = {f for f in files if f.is_file()}
    if not files:
        return None
    return any(_contains(path, AMX_SYMBOL) for path in sorted(files))


def _is_ggml_library(name: str) -> bool:
    return ("ggml" in name or "llama" in name) and any(suffix in name for suffix in _LIBRARY_SUFFIXES)


def _contains(path: Path, needle: bytes) -> bool:
    try:
        with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(needle) >= 0
    except (OSError, ValueError):  # ValueError: an empty file cannot be mapped
        return False


def uses_amx(cpuinfo: Path = _CPUINFO, library_dir: Path | None = None) -> bool:
    """Whether llama.cpp, with its libraries in ``library_dir`` (None: not found), uses AMX on this CPU."""
    if not cpu_has_amx(cpuinfo):
        return False
    build = build_has_amx(library_dir) if library_dir is not None else None
    return build is not False


def llama_cpp_uses_amx() -> bool:
    """``uses_amx`` for this machine and the installed llama-cpp-python, unless llama.cpp's extra buffer types
    are switched off (``LLMW_LLAMA_NO_REPACK``, set where its kernels crash: see ``kernel_fallback``)."""
    return not repacking_disabled() and _machine_uses_amx()


@functools.cache
def _machine_uses_amx() -> bool:
    return uses_amx(_CPUINFO, llama_cpp_library_dir())
