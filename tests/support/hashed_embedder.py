"""A deterministic stand-in embedder for tests of the vector store's bookkeeping (resuming, model changes): each
text's vector comes from its SHA-256, so a vector can be checked against its chunk's text. The tests of what
vectors mean use the real MiniLM model instead (``minilm_gguf``)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

import numpy as np


def hashed_vector(text: str, dimension: int = 16) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dimension)
    return list(map(float, vector / np.linalg.norm(vector)))


class HashedEmbedder:
    def __init__(self, dimension: int = 16, before: Callable[[list[str]], None] | None = None) -> None:
        self.dimension = dimension
        self.before = before  # called with each batch first (a test's kill, say)
        self.batches: list[list[str]] = []

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if self.before is not None:
            self.before(texts)
        self.batches.append(list(texts))
        await asyncio.sleep(0)
        return [hashed_vector(text, self.dimension) for text in texts]
