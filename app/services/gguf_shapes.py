"""Random-weight GGUF models of chosen shapes that llama.cpp loads, for calibrating the memory estimate
(``llm-workstation bench estimate``) without downloads. Their output is gibberish; their buffers are real."""

from __future__ import annotations

import os
from collections.abc import Callable
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
}  # fmt: skip


def _bytes_to_unicode() -> dict[int, str]:
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

    chars = _bytes_to_unicode()
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
) -> Path:
    """Write a random-weight f16 model: ``llama`` (with or without GQA, any head dim via
    ``attention.key_length``) or the sliding-window ``gemma2`` / ``gemma3`` (``attention.sliding_window``;
    llama.cpp makes every 2nd / 5 of 6 layers sliding). ``tie_output`` leaves out ``output.weight`` so the
    output layer reuses ``token_embd.weight`` (gemma2 and gemma3 require it)."""
    import gguf
    import numpy as np

    if architecture not in ("llama", "gemma2", "gemma3"):
        raise ValueError(f"unsupported architecture {architecture!r}")
    if n_head % n_head_kv:
        raise ValueError("n_head must be a multiple of n_head_kv")
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
    writer.add_layer_norm_rms_eps(1e-6)
    if architecture == "llama":
        writer.add_rope_dimension_count(head_dim)
    if sliding_window is not None:
        writer.add_sliding_window(sliding_window)
    n_vocab = add_tokenizer(writer)

    def matrix(rows: int, cols: int) -> Any:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def ones(n: int) -> Any:
        return np.ones(n, dtype=np.float32)

    writer.add_tensor("token_embd.weight", matrix(n_vocab, n_embd))
    norms = _GEMMA_LAYER_NORMS if architecture != "llama" else ("attn_norm", "ffn_norm")
    for i in range(n_layer):
        for norm in norms:
            writer.add_tensor(f"blk.{i}.{norm}.weight", ones(n_embd))
        if architecture == "gemma3":
            writer.add_tensor(f"blk.{i}.attn_q_norm.weight", ones(head_dim))
            writer.add_tensor(f"blk.{i}.attn_k_norm.weight", ones(head_dim))
        writer.add_tensor(f"blk.{i}.attn_q.weight", matrix(n_head * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", matrix(n_head_kv * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", matrix(n_head_kv * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", matrix(n_embd, n_head * head_dim))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", matrix(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", matrix(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", matrix(n_embd, n_ff))
    writer.add_tensor("output_norm.weight", ones(n_embd))
    if not tie_output:
        writer.add_tensor("output.weight", matrix(n_vocab, n_embd))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
