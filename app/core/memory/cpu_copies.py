"""The second copy llama.cpp's CPU backend makes of a host weight for its faster kernels ("extra buffer types").

Following the llama.cpp that llama-cpp-python 0.3.36 vendors: a host weight goes to the first buffer type in
``make_cpu_buft_list`` whose ``supports_op`` takes the weight's op, tried in the order the CPU backend lists them
(``ggml_backend_cpu_get_extra_buffer_types``): **AMX** (x86 with Intel AMX, ``ggml-cpu/amx``), then
**CPU_REPACK** (``ggml-cpu/repack.cpp``), then the plain CPU buffer. The model file stays memory-mapped
(``CPU_Mapped``) as a whole, so a weight in AMX or CPU_REPACK costs its packed size *on top of* its file bytes.

* AMX takes the weight of a ``MUL_MAT`` (not ``token_embd``, a ``GET_ROWS``) whose output features (``ne[1]``)
  are a multiple of 32 and whose ``ne[0]`` is a multiple of the type's alignment: Q4_0/Q4_1/Q8_0 32,
  Q4_K/Q5_K/Q6_K/IQ4_XS 256, F16 16. F16 keeps its size; the quantized types are packed to
  ``ne[1] * get_row_size(ne[0])``: per block the block itself, plus an int32 of compensation for Q8_0, 4 bytes
  for Q4_K/Q5_K and 2 for IQ4_XS (``ggml_backend_amx_get_alloc_size``, ``amx/mmq.cpp``; only ``ne[1]`` rows,
  as there). With ``ne[1]`` a multiple of 32 every size is already a multiple of the buffer's 32-byte alignment.
* CPU_REPACK (x86 with AVX2) takes 2-D Q4_0/Q4_K/IQ4_NL ``MUL_MAT`` weights with ``ne[1]`` a multiple of 8, at
  their own size.
"""

from __future__ import annotations

import re

from app.core.gguf.header import TensorInfo

Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, F16 = 2, 3, 8, 12, 13, 14, 20, 23, 1
_AMX_ROWS = 32  # TILE_N * 2: the MUL_MAT's output (weight ne[1]) must be a multiple of it
_AMX_ALIGNMENT = {Q4_0: 32, Q4_1: 32, Q8_0: 32, Q4_K: 256, Q5_K: 256, Q6_K: 256, IQ4_XS: 256, F16: 16}
# (values per block, bytes per block in the AMX layout): the block plus Q8_0's int32 compensation, Q4_K/Q5_K's
# 4 and IQ4_XS's 2 extra bytes (get_row_size in amx/mmq.cpp).
_AMX_BLOCKS = {
    Q4_0: (32, 18), Q4_1: (32, 20), Q8_0: (32, 34 + 4), Q4_K: (256, 144 + 4), Q5_K: (256, 176 + 4),
    Q6_K: (256, 210), IQ4_XS: (256, 136 + 2),
}  # fmt: skip
_REPACKED_TYPES = {Q4_0, Q4_K, IQ4_NL}
_REPACK_ROWS = 8

# Weights llama.cpp uses in an op other than MUL_MAT (llama-arch.cpp's LLM_TENSOR_INFOS), by name without the
# block prefix and ".weight": lookups (GET_ROWS), experts (MUL_MAT_ID), convolutions, scans, element-wise
# parameters; norms (MUL) are matched by "norm" in the name. No MUL_MAT weight's name is among them or contains
# "norm".
_NOT_MATMUL = frozenset(
    {
        "token_embd", "position_embd", "token_types", "per_layer_token_embd", "attn_rel_b", "cross_attn_rel_b",
        "attn_compressor_ape", "indexer_compressor_ape", "ffn_gate_tid2eid", "nextn.embed_tokens", "d2t",
        "markov_w1", "selector_predecessor", "selector_successor", "masked_embd_centroids",
        "masked_embd_ordering", "ssm_conv1d", "ssm_conv1d_q", "ssm_conv1d_k", "ssm_conv1d_v", "ple_conv1d",
        "shortconv.conv", "conv1d", "conv1", "conv2", "dw", "gamma", "ssm_a", "ssm_d", "time_mix_first",
        "time_mix_lerp_x", "time_mix_lerp_w", "time_mix_lerp_k", "time_mix_lerp_v", "time_mix_lerp_r",
        "time_mix_lerp_g", "time_mix_lerp_fused", "time_mix_decay", "time_mix_w0", "time_mix_a0", "time_mix_v0",
        "time_mix_k_k", "time_mix_k_a", "time_mix_r_k", "time_mix_ln", "channel_mix_lerp_k", "channel_mix_lerp_r",
        "hrm.z_l_init", "output_hc_base", "output_hc_scale", "hc_attn_base", "hc_attn_scale", "hc_ffn_base",
        "hc_ffn_scale", "attn_res_score", "ffn_res_score", "output_res_score", "altup_correct_scale",
        "layer_output_scale", "attn_conv_base", "ffn_conv_base", "attn_sinks", "ffn.act", "exp_probs_b",
        "exp_probs_b_vl", "rope_freqs", "rope_factors_long", "rope_factors_short", "ffn_gate_exps", "ffn_up_exps",
        "ffn_down_exps", "ffn_gate_up_exps", "ffn_gate_chexps", "ffn_up_chexps", "ffn_down_chexps",
    }
)  # fmt: skip
_BLOCK_PREFIX = re.compile(r"^(?:(?:enc|dec)\.)?(?:blk|posnet|convnext)\.\d+\.")


def is_matmul_weight(tensor: TensorInfo) -> bool:
    """Whether llama.cpp multiplies activations by this weight (``MUL_MAT``), the only op AMX takes (and the
    only one CPU_REPACK takes here: expert weights are ``MUL_MAT_ID`` weights, which this estimate never copies)."""
    if len(tensor.shape) < 2 or not tensor.name.endswith(".weight"):
        return False
    stem = _BLOCK_PREFIX.sub("", tensor.name.removesuffix(".weight"))
    return stem not in _NOT_MATMUL and "norm" not in stem


def amx_bytes(tensor: TensorInfo) -> int | None:
    """The bytes of ``tensor``'s copy in llama.cpp's AMX buffer, or None when AMX does not take it."""
    alignment = _AMX_ALIGNMENT.get(tensor.ggml_type)
    if alignment is None or not is_matmul_weight(tensor):
        return None
    k, n = tensor.shape[0], tensor.shape[1]
    if n % _AMX_ROWS or k % alignment:
        return None
    if tensor.ggml_type == F16:
        return tensor.n_bytes  # F16 is not packed
    block_values, block_bytes = _AMX_BLOCKS[tensor.ggml_type]
    return n * (k // block_values) * block_bytes


def repack_bytes(tensor: TensorInfo) -> int | None:
    """The bytes of ``tensor``'s copy in the CPU_REPACK buffer, or None when it is not repacked."""
    if tensor.ggml_type not in _REPACKED_TYPES or len(tensor.shape) != 2 or not is_matmul_weight(tensor):
        return None
    return tensor.n_bytes if tensor.shape[1] % _REPACK_ROWS == 0 else None


def cpu_copy(tensor: TensorInfo, amx: bool, repack: bool) -> tuple[str, int] | None:
    """(buffer name, bytes) of the extra copy of a host weight: AMX first, then CPU_REPACK; None: no copy."""
    if amx and (size := amx_bytes(tensor)) is not None:
        return "AMX", size
    if repack and (size := repack_bytes(tensor)) is not None:
        return "CPU_REPACK", size
    return None
