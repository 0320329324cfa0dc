"""Fuzzing the header reader: mutated and truncated real headers and random bytes give GgufFileError or a
header, never another exception, a hang or a large allocation."""

from __future__ import annotations

import contextlib
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.gguf.header import GgufFileError, read_gguf_header, read_gguf_header_bytes

_FUZZ = settings(max_examples=300, deadline=1000, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def real_header(tmp_path_factory) -> bytes:
    from tests.support.gguf_factory import write_tiny_gguf

    path = write_tiny_gguf(tmp_path_factory.mktemp("fuzz") / "seed.gguf")
    header = read_gguf_header(path)
    return path.read_bytes()[: header.data_start]


def _parse(data: bytes, file_size: int) -> None:
    tracemalloc.start()
    try:
        read_gguf_header_bytes(data, name="fuzz.gguf", file_size=file_size)
    except GgufFileError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 64 << 20


@_FUZZ
@given(st.data())
def test_mutated_real_header(real_header, data):
    mutated = bytearray(real_header)
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(mutated) - 1))
        mutated[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(mutated)))
    _parse(bytes(mutated[:cut]), data.draw(st.sampled_from([cut, len(mutated), 1 << 40])))


@_FUZZ
@given(st.binary(max_size=512), st.integers(0, 1 << 50))
def test_random_bytes_after_the_magic(tail, file_size):
    data = b"GGUF\x03\x00\x00\x00" + tail
    _parse(data, max(file_size, len(data)))


@settings(max_examples=100, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_file_on_disk(real_header, tmp_path, data):
    mutated = bytearray(real_header)
    position = data.draw(st.integers(0, len(mutated) - 1))
    mutated[position] = data.draw(st.integers(0, 255))
    path = tmp_path / "mutated.gguf"
    path.write_bytes(bytes(mutated))
    with contextlib.suppress(GgufFileError):
        read_gguf_header(path)
