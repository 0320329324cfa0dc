"""Detecting whether llama.cpp uses Intel AMX here: the CPU flags llama.cpp's AMX code needs (from /proc/cpuinfo
text) and an AMX-enabled build (the AMX buffer type's symbol in its CPU library), on files written by the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backends.llamacpp.cpu_features import (
    AMX_SYMBOL,
    build_has_amx,
    cpu_has_amx,
    cpuinfo_has_amx,
    llama_cpp_library_dir,
    uses_amx,
)

SAPPHIRE_RAPIDS = "fpu vme sse sse2 avx avx2 avx512f avx512_vnni amx_bf16 avx512_fp16 amx_tile amx_int8"
ICE_LAKE = "fpu vme sse sse2 avx avx2 avx512f avx512_vnni"


def cpuinfo(*flag_lines: str) -> str:
    blocks = [f"processor\t: {i}\nmodel name\t: Test CPU\nflags\t\t: {flags}\n\n" for i, flags in enumerate(flag_lines)]
    return "".join(blocks)


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_cpuinfo_flags():
    assert cpuinfo_has_amx(cpuinfo(SAPPHIRE_RAPIDS).splitlines())
    assert not cpuinfo_has_amx(cpuinfo(ICE_LAKE).splitlines())  # AVX-512 VNNI but no AMX
    assert not cpuinfo_has_amx(cpuinfo(SAPPHIRE_RAPIDS.replace(" avx512_vnni", "")).splitlines())  # needs VNNI too
    assert not cpuinfo_has_amx(cpuinfo(SAPPHIRE_RAPIDS.replace(" amx_tile", "")).splitlines())
    assert not cpuinfo_has_amx(["processor\t: 0", "Features\t: fp asimd"])  # an Arm CPU: no flags line
    assert not cpuinfo_has_amx(cpuinfo(ICE_LAKE, SAPPHIRE_RAPIDS).splitlines())  # the first processor decides
    assert not cpuinfo_has_amx(["flagsx: amx_int8 amx_tile avx512_vnni"])


def test_reading_cpuinfo(tmp_path):
    assert cpu_has_amx(write(tmp_path / "cpuinfo", cpuinfo(SAPPHIRE_RAPIDS)))
    assert not cpu_has_amx(write(tmp_path / "other", cpuinfo(ICE_LAKE)))
    assert not cpu_has_amx(tmp_path / "missing")  # not Linux
    assert not cpu_has_amx(tmp_path)  # a folder
    assert not cpu_has_amx(write(tmp_path / "binary", b"\xff\xfe" * 1000))


def test_the_build_check_looks_for_the_amx_buffer_type(tmp_path):
    with_amx = tmp_path / "amx"
    with_amx.mkdir()
    write(with_amx / "libggml-cpu.so.0.25.3", b"\x7fELF" + b"\0" * 4096 + b"_Z28" + AMX_SYMBOL + b"v\0")
    (with_amx / "libggml-cpu.so").symlink_to("libggml-cpu.so.0.25.3")
    write(with_amx / "libllama.so", b"\x7fELF no amx here")
    assert build_has_amx(with_amx) is True
    without = tmp_path / "plain"
    without.mkdir()
    write(without / "libggml-cpu.so", b"\x7fELF" + b"ggml_backend_cpu_repack_buffer_type\0")
    write(without / "libggml-base.so", b"")  # an empty file cannot be mapped: no AMX there
    write(without / "notes.txt", AMX_SYMBOL)  # not a library
    assert build_has_amx(without) is False
    empty = tmp_path / "empty"
    empty.mkdir()
    assert build_has_amx(empty) is None and build_has_amx(tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("cpu", "build", "expected"),
    [(True, True, True), (True, False, False), (True, None, True), (False, True, False), (False, None, False)],
)
def test_amx_needs_the_cpu_and_a_build_with_it(tmp_path, cpu, build, expected):
    info = write(tmp_path / "cpuinfo", cpuinfo(SAPPHIRE_RAPIDS if cpu else ICE_LAKE))
    library_dir = tmp_path / "lib"
    library_dir.mkdir()
    if build is not None:
        write(library_dir / "libggml-cpu.so", AMX_SYMBOL if build else b"ggml_backend_cpu_buffer_type")
    assert uses_amx(info, library_dir) is expected
    if build is None:
        assert uses_amx(info, None) is expected  # llama-cpp-python not installed: a build for this CPU assumed


def test_the_library_folder_follows_llama_cpp_lib_path(monkeypatch, tmp_path):
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(tmp_path))
    assert llama_cpp_library_dir() == tmp_path
    monkeypatch.delenv("LLAMA_CPP_LIB_PATH")
    found = llama_cpp_library_dir()
    if found is not None:  # the installed llama-cpp-python: its lib/ holds the CPU backend
        assert found.name == "lib" and any("ggml" in p.name or "llama" in p.name for p in found.iterdir())
