"""The estimate's arithmetic, checked by hand-computed figures (GPU splits cannot be measured on this CPU-only
machine, so the per-layer offload rules are tested here by their arithmetic)."""

from __future__ import annotations

import pytest

from app.core.gguf.header import read_gguf_header
from app.core.memory.estimate import EstimateError, EstimateSettings, estimate_memory, gpu_layer_start
from tests.support.gguf_factory import write_shaped_gguf

MIB = 1 << 20
LLAMA = {"architecture": "llama", "n_layer": 4, "n_embd": 256, "n_head": 8, "n_head_kv": 2, "n_ff": 512}
GEMMA = {"architecture": "gemma3", "n_layer": 6, "n_embd": 256, "n_head": 4, "n_head_kv": 1, "head_dim": 64}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return read_gguf_header(write_shaped_gguf(tmp_path_factory.mktemp("est") / "l.gguf", **LLAMA))


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    path = write_shaped_gguf(tmp_path_factory.mktemp("est") / "g.gguf", sliding_window=128, tie_output=True, **GEMMA)
    return read_gguf_header(path)


def _bytes(header, prefix):
    return sum(t.n_bytes for t in header.tensors if t.name.startswith(prefix))


def test_kv_cache_f16_and_padding(llama):
    # 4 layers x 1024 cells (1000 padded to 256) x (K + V) x 2 KV heads x 32 dims x 2 bytes
    estimate = estimate_memory(llama, EstimateSettings(n_ctx=1000))
    assert estimate.kv_cells == 1024
    assert estimate.kv_cache_bytes == 4 * 1024 * 2 * 64 * 2 == estimate.kv_host_bytes


def test_kv_cache_quantized(llama):
    q8 = estimate_memory(llama, EstimateSettings(n_ctx=4096, type_k="q8_0", type_v="q8_0", flash_attn=True))
    assert q8.kv_cache_bytes == 4 * 4096 * 2 * (64 // 32 * 34)  # q8_0: 34 bytes per 32 values
    q4 = estimate_memory(llama, EstimateSettings(n_ctx=4096, type_k="q4_0", type_v="f16", flash_attn=True))
    assert q4.kv_cache_bytes == 4 * 4096 * (64 // 32 * 18 + 64 * 2)


def test_sliding_window_cache(gemma):
    full = estimate_memory(gemma, EstimateSettings(n_ctx=8192))
    assert full.kv_cache_bytes == 6 * 8192 * 2 * 64 * 2  # swa_full: every layer gets the whole context
    small = estimate_memory(gemma, EstimateSettings(n_ctx=8192, swa_full=False, n_ubatch=512))
    assert small.kv_swa_cells == 768  # pad256(128 + 512)
    assert small.kv_cache_bytes == (1 * 8192 + 5 * 768) * 2 * 64 * 2  # layer 5 is global, 0-4 slide


def test_weights_on_the_host_only(llama):
    estimate = estimate_memory(llama, EstimateSettings())
    assert estimate.weights_bytes == estimate.weights_host_bytes == sum(t.n_bytes for t in llama.tensors)
    assert estimate.gpu_bytes == 0 and estimate.host_bytes == estimate.total_bytes


def test_gpu_layer_split_arithmetic(llama):
    assert [gpu_layer_start(4, n) for n in (0, 1, 2, 5, 99, -1)] == [5, 4, 3, 0, 0, 0]
    out = _bytes(llama, "output")
    one = estimate_memory(llama, EstimateSettings(n_gpu_layers=1))  # only the output layer
    assert one.weights_gpu_bytes == out and one.kv_gpu_bytes == 0 and one.gpu_layers == 0
    three = estimate_memory(llama, EstimateSettings(n_gpu_layers=3, n_ctx=1024))
    assert three.weights_gpu_bytes == out + _bytes(llama, "blk.2.") + _bytes(llama, "blk.3.")
    assert three.kv_gpu_bytes == 2 * 1024 * 2 * 64 * 2 == three.kv_host_bytes
    every = estimate_memory(llama, EstimateSettings(n_gpu_layers=-1))
    assert every.weights_host_bytes == _bytes(llama, "token_embd")  # the input layer stays on the host
    assert every.kv_host_bytes == 0 and every.compute_gpu_bytes > every.compute_host_bytes > 0


def test_tied_output_gets_a_gpu_copy(gemma):
    embd = _bytes(gemma, "token_embd")
    estimate = estimate_memory(gemma, EstimateSettings(n_gpu_layers=1))
    assert estimate.weights_gpu_bytes == embd + _bytes(gemma, "output_norm")
    assert estimate.weights_bytes == sum(t.n_bytes for t in gemma.tensors) + embd


def test_compute_scales_with_context_without_flash_attention(llama):
    small = estimate_memory(llama, EstimateSettings(n_ctx=1024))
    large = estimate_memory(llama, EstimateSettings(n_ctx=4096))
    # the f32 KQ matrix (8 heads) and mask grow by 3072 cells x 512 tokens x 4 bytes x (8 + 1)
    assert large.compute_bytes - small.compute_bytes == 3072 * 512 * 4 * 9
    fa = estimate_memory(llama, EstimateSettings(n_ctx=4096, flash_attn=True))
    assert fa.compute_bytes < large.compute_bytes / 4


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (EstimateSettings(type_v="q8_0"), "needs flash attention"),
        (EstimateSettings(type_k="q3_x"), "Unknown K cache type"),
        (EstimateSettings(n_ctx=0), "at least 1 token"),
        (EstimateSettings(n_parallel=0), "at least 1"),
    ],
)
def test_bad_settings(llama, settings, message):
    with pytest.raises(EstimateError, match=message):
        estimate_memory(llama, settings)


def test_header_without_shape_keys(llama):
    import copy

    broken = copy.copy(llama)
    broken.metadata = {k: v for k, v in llama.metadata.items() if not k.endswith("block_count")}
    with pytest.raises(EstimateError, match=r"no llama\.block_count"):
        estimate_memory(broken, EstimateSettings())


def test_per_layer_kv_heads(llama):
    import copy

    varied = copy.copy(llama)
    varied.metadata = {**llama.metadata, "llama.attention.head_count_kv": [2, 2, 1, 1]}
    estimate = estimate_memory(varied, EstimateSettings(n_ctx=1024))
    assert estimate.kv_cache_bytes == 1024 * 2 * 32 * 2 * (2 + 2 + 1 + 1)  # cells x (K+V) x head dim x f16


def test_parallel_sequences_split_the_context(llama):
    # llama.cpp: n_ctx_seq = pad256(n_ctx / n_seq); each sequence gets its own stream of that many cells
    estimate = estimate_memory(llama, EstimateSettings(n_ctx=4096, n_parallel=3))
    assert estimate.kv_cells == 1536 * 3 and estimate.output_bytes == 3 * 579 * 4


def test_malformed_shape_metadata_is_an_estimate_error_not_a_crash(tmp_path):
    from pathlib import Path

    from app.core.gguf.header import GgufHeader
    from app.core.memory.estimate import EstimateError, model_shape

    header = GgufHeader(
        path=Path(tmp_path / "odd.gguf"),
        version=3,
        file_size=1,
        metadata={"general.architecture": "llama", "llama.block_count": "twelve", "llama.embedding_length": 64,
                  "llama.attention.head_count": 4},
    )  # fmt: skip
    with pytest.raises(EstimateError, match="malformed shape metadata"):
        model_shape(header)
