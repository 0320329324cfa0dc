"""A tiny generated *embedding* model: the tiny llama of ``gguf_factory`` with ``llama.pooling_type`` set (mean), so
llama.cpp pools its vectors itself and the app treats it as an embedding model (``embeds_only``), not a chat model.
Random weights; deterministic for the same arguments."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gguf

from app.devtools import gguf_shapes
from tests.support import gguf_factory


def write_embedding_gguf(
    path: str | os.PathLike[str], *, name: str = "tiny-embed", context_length: int = 2048, seed: int = 7
) -> Path:
    def tokenizer(writer: Any) -> int:
        n_vocab = gguf_factory._add_tokenizer(writer, None)
        writer.add_pooling_type(gguf.PoolingType.MEAN)
        return n_vocab

    return gguf_shapes.write_shaped_gguf(
        path, n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, context_length=context_length, seed=seed,
        name=name, add_tokenizer=tokenizer, rms_eps=1e-5,
    )  # fmt: skip
