"""A tiny GGUF whose next tokens are all equally likely (its output matrix is zero): whatever a grammar lets
through, it picks at random, so a grammar that allows a wrong character is caught within a few replies. Its
tokenizer has all 256 byte tokens (control characters too) and a ChatML chat template."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from app.devtools.gguf_shapes import add_byte_tokenizer, write_shaped_gguf
from tests.support.gguf_factory import CHATML_TEMPLATE


def write_uniform_gguf(path: str | os.PathLike[str], *, name: str = "uniform-model") -> Path:
    def tokenizer(writer: Any) -> int:
        size = add_byte_tokenizer(writer)
        writer.add_chat_template(CHATML_TEMPLATE)
        return size

    return write_shaped_gguf(
        path, n_layer=1, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, context_length=2048, name=name,
        add_tokenizer=tokenizer, adjust_output=lambda weights: weights * 0,
    )  # fmt: skip
