"""Which host weights llama.cpp's CPU backend copies into its AMX or CPU_REPACK buffer, and at what size: the rules
of llama.cpp 0.3.36 (amx.cpp supports_op, mmq.cpp get_row_size) checked by hand-computed figures on any machine.
(The calibration tests check them against the real llama.cpp where it uses AMX.)"""

from __future__ import annotations

import math

import pytest

from app.core.gguf.header import TensorInfo, ggml_row_bytes, read_gguf_header
from app.core.memory.cpu_copies import amx_bytes, cpu_copy, is_matmul_weight, repack_bytes
from app.core.memory.estimate import EstimateSettings, estimate_memory
from app.devtools.gguf_shapes import write_shaped_gguf as write_shaped_gguf_with
from tests.support.gguf_factory import write_shaped_gguf

F16, BF16, Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS = 1, 30, 2, 3, 6, 8, 12, 13, 14, 20, 23


def weight(name: str, shape: tuple[int, ...], ggml_type: int) -> TensorInfo:
    return TensorInfo(name, shape, ggml_type, 0, ggml_row_bytes(ggml_type, math.prod(shape)))


@pytest.mark.parametrize(
    ("ggml_type", "row_bytes"),
    [
        (Q4_0, 16 * 18),  # 512 values = 16 blocks of 18 bytes, as in the file
        (Q4_1, 16 * 20),
        (Q8_0, 16 * (34 + 4)),  # + an int32 of compensation per block
        (Q4_K, 2 * (144 + 4)),  # + 4 bytes per 256-value block
        (Q5_K, 2 * (176 + 4)),
        (Q6_K, 2 * 210),
        (IQ4_XS, 2 * (136 + 2)),  # + 2 bytes per block
        (F16, 512 * 2),  # not packed
    ],
)
def test_amx_sizes_of_a_512_by_64_matrix(ggml_type, row_bytes):
    tensor = weight("blk.0.attn_k.weight", (512, 64), ggml_type)
    assert amx_bytes(tensor) == 64 * row_bytes
    assert cpu_copy(tensor, amx=True, repack=True) == ("AMX", 64 * row_bytes)  # AMX is tried before CPU_REPACK


def test_rows_not_a_multiple_of_32_are_left_to_cpu_repack():
    """An output layer over a 264-token vocabulary: 264 % 32 != 0, so AMX refuses; 264 % 8 == 0, so Q4_0 repacks."""
    output = weight("output.weight", (512, 264), Q4_0)
    assert amx_bytes(output) is None and repack_bytes(output) == output.n_bytes
    assert cpu_copy(output, amx=True, repack=True) == ("CPU_REPACK", output.n_bytes)
    assert cpu_copy(weight("output.weight", (512, 260), Q4_0), amx=True, repack=True) is None  # 260 % 8 != 0
    assert amx_bytes(weight("output.weight", (512, 262144), Q8_0)) == 262144 * 16 * 38  # a 32-multiple vocab


def test_f16_columns_must_be_a_multiple_of_16():
    assert amx_bytes(weight("blk.0.ffn_down.weight", (1544, 512), F16)) is None  # 1544 % 16 == 8
    assert amx_bytes(weight("blk.0.ffn_down.weight", (1552, 512), F16)) == 1552 * 512 * 2


def test_types_amx_has_no_kernels_for():
    for ggml_type in (BF16, Q5_0, IQ4_NL):
        assert amx_bytes(weight("blk.0.attn_q.weight", (512, 512), ggml_type)) is None
    iq4_nl = weight("blk.0.attn_q.weight", (512, 512), IQ4_NL)
    assert cpu_copy(iq4_nl, amx=True, repack=True) == ("CPU_REPACK", iq4_nl.n_bytes)
    assert cpu_copy(weight("blk.0.attn_q.weight", (512, 512), Q5_0), amx=True, repack=True) is None


def test_only_matrix_multiplication_weights_are_copied():
    assert not is_matmul_weight(weight("token_embd.weight", (512, 256), Q4_0))  # GET_ROWS
    assert amx_bytes(weight("token_embd.weight", (512, 256), Q4_0)) is None
    assert repack_bytes(weight("token_embd.weight", (512, 256), Q4_0)) is None
    assert amx_bytes(weight("output.weight", (512, 256), Q4_0)) == 256 * 16 * 18  # the tied duplicate's name
    for name in ("blk.0.ssm_conv1d.weight", "enc.blk.1.attn_rel_b.weight", "blk.2.attn_norm.weight"):
        assert not is_matmul_weight(weight(name, (512, 64), F16)), name
    assert not is_matmul_weight(weight("blk.0.attn_q.bias", (512, 64), F16))
    assert not is_matmul_weight(weight("blk.0.attn_norm.weight", (512,), F16))
    experts = weight("blk.0.ffn_up_exps.weight", (512, 64, 8), Q4_0)  # MUL_MAT_ID
    assert cpu_copy(experts, amx=True, repack=True) is None
    for name in ("blk.0.attn_q.weight", "dec.blk.3.cross_attn_o.weight", "blk.1.ffn_gate_inp.weight"):
        assert is_matmul_weight(weight(name, (512, 64), F16)), name


def test_without_amx_only_cpu_repack_copies():
    tensor = weight("blk.0.attn_k.weight", (512, 64), Q4_0)
    assert cpu_copy(tensor, amx=False, repack=True) == ("CPU_REPACK", tensor.n_bytes)
    assert cpu_copy(tensor, amx=False, repack=False) is None
    assert cpu_copy(weight("blk.0.attn_k.weight", (512, 64), Q8_0), amx=False, repack=True) is None


QUANT = {
    "architecture": "llama", "n_layer": 2, "n_embd": 512, "n_head": 8, "n_head_kv": 2, "n_ff": 1544,
    "tensor_types": {
        "token_embd": "q4_0", "output": "q6_k", "attn_q": "q8_0", "attn_k": "q4_0", "attn_v": "q4_k",
        "attn_output": "iq4_xs", "ffn_gate": "q4_0", "ffn_up": "q4_1", "ffn_down": "f16",
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    return read_gguf_header(write_shaped_gguf(tmp_path_factory.mktemp("copies") / "q.gguf", **QUANT))


def test_a_quantized_model_on_a_cpu_with_and_without_amx(quantized):
    file_bytes = sum(t.n_bytes for t in quantized.tensors)
    # Per layer, to AMX: attn_q 512 rows x 16 Q8_0 blocks of 38 bytes, attn_k 128 x 16 x 18 (Q4_0),
    # attn_v 128 x 2 x 148 (Q4_K), attn_output 512 x 2 x 138 (IQ4_XS). ffn_gate (Q4_0, 1544 rows) is repacked;
    # ffn_up (Q4_1, 1544 rows), ffn_down (F16, 1544 columns), output (579 rows) and token_embd are not copied.
    amx_layer = 512 * 16 * 38 + 128 * 16 * 18 + 128 * 2 * 148 + 512 * 2 * 138
    gate = 1544 * 16 * 18
    amx = estimate_memory(quantized, EstimateSettings(cpu_amx=True))
    assert amx.weights_amx_bytes == 2 * amx_layer and amx.weights_repack_bytes == 2 * gate
    assert amx.weights_host_bytes == file_bytes + 2 * (amx_layer + gate)
    plain = estimate_memory(quantized, EstimateSettings())  # no AMX: attn_k's Q4_0 and attn_v's Q4_K repack too
    assert plain.weights_amx_bytes == 0 and plain.weights_repack_bytes == 2 * (gate + 128 * 16 * 18 + 128 * 2 * 144)
    assert estimate_memory(quantized, EstimateSettings(cpu_repack=False)).weights_host_bytes == file_bytes
    assert amx.kv_cache_bytes == plain.kv_cache_bytes and amx.compute_bytes == plain.compute_bytes


def _vocabulary(size: int):
    def add_tokenizer(writer) -> int:
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list([f"<t{i}>" for i in range(size)])
        return size

    return add_tokenizer


def test_an_f16_model_copies_its_layer_matrices_into_amx(tmp_path):
    shape = {"architecture": "llama", "n_layer": 3, "n_embd": 256, "n_head": 8, "n_head_kv": 2, "n_ff": 512}
    header = read_gguf_header(write_shaped_gguf(tmp_path / "f16.gguf", **shape))
    layer_matrices = sum(t.n_bytes for t in header.tensors if t.name.startswith("blk.") and len(t.shape) == 2)
    output = next(t for t in header.tensors if t.name == "output.weight")
    assert output.shape[1] == 579  # a vocabulary that is no multiple of 32: the output matrix stays in CPU_Mapped
    amx = estimate_memory(header, EstimateSettings(cpu_amx=True))
    assert amx.weights_amx_bytes == layer_matrices and amx.weights_repack_bytes == 0
    assert amx.weights_host_bytes == sum(t.n_bytes for t in header.tensors) + layer_matrices
    # Offloaded layers take no host copy: with 2 of 4 (the output layer and layer 2) on the GPU, layers 0-1 remain.
    partial = estimate_memory(header, EstimateSettings(cpu_amx=True, n_gpu_layers=2))
    assert partial.weights_amx_bytes == 2 * layer_matrices // 3


def test_tied_embeddings_are_copied_as_the_output_matrix(tmp_path):
    """gemma-style tied output: llama.cpp loads token_embd a second time as output.weight, a MUL_MAT weight, so
    a vocabulary that is a multiple of 32 gets an AMX copy while the output layer is on the host."""
    shape = {"architecture": "gemma3", "n_layer": 2, "n_embd": 256, "n_head": 4, "n_head_kv": 1, "head_dim": 64}
    path = write_shaped_gguf_with(tmp_path / "tied.gguf", add_tokenizer=_vocabulary(288), tie_output=True, **shape)
    header = read_gguf_header(path)
    embd = next(t for t in header.tensors if t.name == "token_embd.weight")
    assert embd.shape == (256, 288)
    layers = sum(amx_bytes(t) or 0 for t in header.tensors)
    assert layers > 0 and amx_bytes(embd) is None  # the lookup itself is not copied
    on_host = estimate_memory(header, EstimateSettings(cpu_amx=True))
    assert on_host.weights_amx_bytes == layers + embd.n_bytes
    on_gpu = estimate_memory(header, EstimateSettings(cpu_amx=True, n_gpu_layers=1))  # the output layer offloaded
    assert on_gpu.weights_amx_bytes == layers and on_gpu.weights_gpu_bytes > embd.n_bytes


def test_a_tied_vocabulary_of_32_multiple_gets_its_amx_copy():
    """The real case (gemma-3 270m: Q8_0 embeddings of 262,144 tokens) through the estimate's own rule."""
    duplicate = weight("output.weight", (640, 262144), Q8_0)
    assert cpu_copy(duplicate, amx=True, repack=True) == ("AMX", 262144 * 20 * 38)
