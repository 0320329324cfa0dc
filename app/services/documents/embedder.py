"""What turns passages into vectors for the documents index: an ``Embedder`` (``async embed(texts)``), and the one
the Workstation supplies, ``HostEmbedder``: a GGUF embedding model run by the engine host.

The host puts it in its embedding slot (a second llama.cpp worker) beside the chat model when the memory estimate
says both fit, so the model loads once and the chat model stays; with nothing else loaded it may run on the
engine's own worker. It never unloads a chat model to make room: it raises ``EmbedderWaiting`` instead, and the
background embedding stops, saying why, until it is asked again. Its load is the model's own settings with the
context capped at the length the model was trained on (a BERT has no positions past it); a text too long even so
is cut until it fits."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from app.backends.protocol import RequestRefusedError
from app.core.errors import UnavailableError
from app.core.params import LoadParams

if TYPE_CHECKING:
    from app.services.engines.host import EngineHost


class Embedder(Protocol):
    async def embed(self, texts: list[str]) -> list[list[float]]: ...


class EmbedderWaiting(UnavailableError):
    """The embedding model cannot load now without unloading the chat model."""


def normalized(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    """``vectors`` as float32 rows of unit length (a zero row stays zero)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or not matrix.size:
        raise ValueError("the embedding model gave no vectors")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


async def embed_fitting(embedder: Embedder, texts: list[str]) -> list[list[float]]:
    """``embedder.embed(texts)``; a batch refused as too long is embedded one by one, a text cut in half until its
    model takes it."""
    try:
        return await embedder.embed(texts)
    except RequestRefusedError:
        if len(texts) == 1 and len(texts[0]) <= 16:
            raise
    if len(texts) == 1:
        return await embed_fitting(embedder, [texts[0][: len(texts[0]) // 2]])
    return [vector for text in texts for vector in await embed_fitting(embedder, [text])]


class HostEmbedder:
    """``entry`` (a GGUF embedding model in the library) on the engine host; ``load`` gives its load settings."""

    def __init__(self, host: EngineHost, entry: str, load: Callable[[], LoadParams]) -> None:
        self.host = host
        self.entry = entry
        self._load = load
        self._params: LoadParams | None = None

    async def embed(self, texts: list[str]) -> list[list[float]]:
        params = await self.params()
        if await self.host.embeds_beside(self.entry, params):
            async with self.host.use_beside(self.entry, params) as turn:
                return await turn.embed(texts)
        from app.services.engines.entries import EngineKind, display_name

        loaded = self.host.loaded(EngineKind.LLAMACPP)
        if loaded is not None and not loaded.serves(self.entry, params):
            raise EmbedderWaiting(
                f"{display_name(self.entry)} does not fit in memory beside {loaded.info.name}; documents are "
                "embedded when that model is unloaded."
            )
        async with self.host.use(self.entry, params) as turn:
            return await turn.embed(texts)

    async def params(self) -> LoadParams:
        """The load: the model's settings for embeddings, the context no longer than it was trained on."""
        if self._params is None:
            trained = await asyncio.to_thread(_trained_context, self.entry)
            base = replace(await asyncio.to_thread(self._load), embedding=True)
            self._params = replace(base, n_ctx=min(base.n_ctx, trained or base.n_ctx))
        return self._params


def _trained_context(entry: str) -> int | None:
    from app.core.gguf.header import GgufFileError, read_gguf_header

    try:
        return read_gguf_header(entry).context_length
    except (GgufFileError, OSError):
        return None


def embedding_models(paths: Sequence[str]) -> list[str]:
    """Those of ``paths`` (GGUF files) that are embedding models by their header (blocking: call off the loop)."""
    from app.core.gguf.header import GgufFileError, read_gguf_header
    from app.services.engines.embedding_slot import embeds_only

    found = []
    for path in paths:
        try:
            header = read_gguf_header(path)
        except (GgufFileError, OSError):
            continue
        if embeds_only(header.architecture, header.metadata):
            found.append(path)
    return found
