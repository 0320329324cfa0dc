"""Random-weight GGUF models of chosen shapes that llama.cpp loads, for calibrating the memory estimate
(``llm-workstation bench estimate``) without downloads. Their output is gibberish; their buffers are real."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

_GEMMA_LAYER_NORMS = ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm")
_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Shapes the calibration tests and ``bench estimate`` use: large enough (tens of MiB of weights, MiBs of KV)
# that the log's 2-decimal MiB rounding is far below the tolerance.
CALIBRATION_SHAPES: dict[str, dict[str, Any]] = {
    "llama-mha": {"architecture": "llama", "n_layer": 6, "n_embd": 512, "n_head": 8, "n_head_kv": 8, "n_ff": 1536},
    "llama-gqa": {"architecture": "llama", "n_layer": 8, "n_embd": 512, "n_head": 16, "n_head_kv": 4, "n_ff": 1408},
    "llama-hd128": {
        "architecture": "llama", "n_layer": 4, "n_embd": 512, "n_head": 8, "n_head_kv": 2, "head_dim": 128,
        "n_ff": 1024,
    },
    "gemma3-swa": {
        "architecture": "gemma3", "n_layer": 12, "n_embd": 384, "n_head": 4, "n_head_kv": 1, "head_dim": 128,
        "n_ff": 1024, "sliding_window": 256, "tie_output": True,
    },
    "gemma2-swa": {
        "architecture": "gemma2", "n_layer": 6, "n_embd": 384, "n_head": 6, "n_head_kv": 2, "head_dim": 64,
        "n_ff": 1024, "sliding_window": 512, "tie_output": True,
    },
    # Quantized matrices where the CPU backend's extra copies differ: with Intel AMX, layer matrices go to AMX
    # (every AMX type, alternating by layer), ffn_gate's 1544 rows (not a multiple of 32) to CPU_REPACK, and
    # ffn_up (Q4_1, 1544 rows), ffn_down (F16, 1544 columns: not a multiple of 16), output (260 rows) and
    # token_embd (a lookup) nowhere. Without AMX, attn_k's Q4_0 and ffn_gate go to CPU_REPACK.
    "llama-quant": {
        "architecture": "llama", "n_layer": 4, "n_embd": 512, "n_head": 8, "n_head_kv": 2, "n_ff": 1544,
        "tensor_types": {
            "token_embd": "q4_0", "output": "q6_k", "attn_q": ("q8_0", "q6_k"), "attn_k": ("q4_k", "q4_0"),
            "attn_v": ("q5_k", "q4_1"), "attn_output": ("iq4_xs", "q8_0"), "ffn_gate": "q4_0",
            "ffn_up": "q4_1", "ffn_down": "f16",
        },
    },
}  # fmt: skip
MATRIX_ROLES = ("token_embd", "output", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


@functools.cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character mapping."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def add_byte_tokenizer(writer: Any) -> int:
    """A byte-level GPT-2 style tokenizer (256 byte tokens, one merge, 3 control tokens); returns its size."""
    import gguf

    chars = bytes_to_unicode()
    tokens = [chars[b] for b in range(256)] + ["Ġt", *_SPECIAL_TOKENS]
    types = [gguf.TokenType.NORMAL] * 257 + [gguf.TokenType.CONTROL] * len(_SPECIAL_TOKENS)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(["Ġ t"])
    writer.add_bos_token_id(tokens.index(_SPECIAL_TOKENS[0]))
    writer.add_eos_token_id(tokens.index(_SPECIAL_TOKENS[2]))
    return len(tokens)


def write_shaped_gguf(
    path: str | os.PathLike[str],
    *,
    architecture: str = "llama",
    n_layer: int = 4,
    n_embd: int = 256,
    n_head: int = 8,
    n_head_kv: int = 8,
    head_dim: int | None = None,
    n_ff: int = 512,
    context_length: int = 4096,
    sliding_window: int | None = None,
    tie_output: bool = False,
    seed: int = 0,
    name: str = "shaped-test-model",
    add_tokenizer: Callable[[Any], int] = add_byte_tokenizer,
    tensor_types: Mapping[str, str | Sequence[str]] | None = None,
    rms_eps: float = 1e-6,
    adjust_output: Callable[[Any], Any] | None = None,
) -> Path:
    """Write a random-weight model: ``llama`` (with or without GQA, any head dim via
    ``attention.key_length``) or the sliding-window ``gemma2`` / ``gemma3`` (``attention.sliding_window``;
    llama.cpp makes every 2nd / 5 of 6 layers sliding). ``tie_output`` leaves out ``output.weight`` so the
    output layer reuses ``token_embd.weight`` (gemma2 and gemma3 require it). Any other architecture name gets
    llama's tensors, which llama.cpp refuses to load (a test of that failure). ``adjust_output`` may change the
    output matrix (f32, one row per token) before it is written; ``rms_eps`` is the layers' norm epsilon.

    Matrices are f16 unless ``tensor_types`` maps their role (``MATRIX_ROLES``: ``attn_q``, ``ffn_down``,
    ``output`` ...) to a GGML type name (``q8_0``, ``q4_k``, ``iq4_xs`` ...) or to a sequence of names that
    the layers take in turn. Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 are quantized from the random values; types gguf-py cannot
    quantize get zero blocks (the same bytes in memory)."""
    import gguf
    import numpy as np

    if n_head % n_head_kv:
        raise ValueError("n_head must be a multiple of n_head_kv")
    types = _check_tensor_types(tensor_types or {})
    path = Path(path)
    head_dim = head_dim or n_embd // n_head
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(context_length)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(rms_eps)
    gemma = architecture in ("gemma2", "gemma3")
    if not gemma:
        writer.add_rope_dimension_count(head_dim)
    if sliding_window is not None:
        writer.add_sliding_window(sliding_window)
    n_vocab = add_tokenizer(writer)

    def add_matrix(name: str, rows: int, cols: int, role: str, layer: int = 0) -> None:
        values = rng.standard_normal((rows, cols), dtype=np.float32) * 0.02
        if role == "output" and adjust_output is not None:
            values = adjust_output(values)
        kind = types.get(role, ("f16",))
        _add_matrix(writer, name, values, kind[layer % len(kind)])

    def ones(n: int) -> Any:
        return np.ones(n, dtype=np.float32)

    add_matrix("token_embd.weight", n_vocab, n_embd, "token_embd")
    norms = _GEMMA_LAYER_NORMS if gemma else ("attn_norm", "ffn_norm")
    for i in range(n_layer):
        for norm in norms:
            writer.add_tensor(f"blk.{i}.{norm}.weight", ones(n_embd))
        if architecture == "gemma3":
            writer.add_tensor(f"blk.{i}.attn_q_norm.weight", ones(head_dim))
            writer.add_tensor(f"blk.{i}.attn_k_norm.weight", ones(head_dim))
        for role, rows, cols in (
            ("attn_q", n_head * head_dim, n_embd),
            ("attn_k", n_head_kv * head_dim, n_embd),
            ("attn_v", n_head_kv * head_dim, n_embd),
            ("attn_output", n_embd, n_head * head_dim),
            ("ffn_gate", n_ff, n_embd),
            ("ffn_up", n_ff, n_embd),
            ("ffn_down", n_embd, n_ff),
        ):
            add_matrix(f"blk.{i}.{role}.weight", rows, cols, role, i)
    writer.add_tensor("output_norm.weight", ones(n_embd))
    if not tie_output:
        add_matrix("output.weight", n_vocab, n_embd, "output")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _check_tensor_types(tensor_types: Mapping[str, str | Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """``tensor_types`` with every value a tuple of known GGML type names; ValueError names what is wrong."""
    import gguf

    checked = {}
    for role, kinds in tensor_types.items():
        if role not in MATRIX_ROLES:
            raise ValueError(f"unknown matrix role {role!r}: use one of {', '.join(MATRIX_ROLES)}")
        names = (kinds,) if isinstance(kinds, str) else tuple(kinds)
        unknown = [k for k in names if k.upper() not in gguf.GGMLQuantizationType.__members__]
        if unknown or not names:
            raise ValueError(f"unknown GGML type {unknown[0] if unknown else None!r} for {role}: use e.g. q8_0, f16")
        checked[role] = names
    return checked


def _add_matrix(writer: Any, name: str, values: Any, type_name: str) -> None:
    """Add ``values`` (f32, rows x columns) as ``type_name``; ValueError when the columns do not fill its blocks."""
    import gguf
    import numpy as np

    if type_name == "f16":
        writer.add_tensor(name, values.astype(np.float16))
        return
    qtype = gguf.GGMLQuantizationType[type_name.upper()]
    block_size = gguf.GGML_QUANT_SIZES[qtype][0]
    if values.shape[1] % block_size:
        raise ValueError(f"{name}: {values.shape[1]} columns are not a whole number of {type_name} blocks")
    try:
        packed = gguf.quants.quantize(values, qtype)
    except NotImplementedError:
        packed = np.zeros(gguf.quants.quant_shape_to_byte_shape(values.shape, qtype), dtype=np.uint8)
    writer.add_tensor(name, packed, raw_dtype=qtype)
