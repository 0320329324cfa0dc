"""Embeddings in the worker, with their token counts: from a model loaded for embeddings (``LlamaEngine.embed``),
or from the loaded chat context, so a chat model answers embeddings without being loaded again.

On a chat context embeddings are switched on for the call (``llama_set_embeddings``): each text is decoded alone
from position 0, every token an output, and its hidden states are mean-pooled and normalized — what a chat model
loaded for embeddings gives (mean pooling, ``engine._embedding_kwargs``), so a vector does not depend on how the
model was loaded. The chat's KV cache is copied out first and put back after, so the next chat request still
reuses its prompt cache; a cache too large to copy is dropped instead (the next chat evaluates its prompt again).
"""

from __future__ import annotations

import ctypes
from typing import Any

from app.backends.llamacpp.engine import NOT_FOR_EMBEDDING, EngineError, LlamaEngine
from app.backends.llamacpp.protocol import ERR_BAD_INPUT, ERR_GENERATION, ERR_PROMPT_TOO_LONG

CHUNK = 32  # tokens per decode: every one is an output, so llama.cpp's output buffer holds CHUNK rows of logits
KEEP_CACHE_MAX = 1 << 30  # the largest chat KV cache copied out and back (bytes); a larger one is dropped
POOLED = "This model pools its own vectors (an embedding model) but was loaded for chat. " + NOT_FOR_EMBEDDING


def embed(engine: LlamaEngine, texts: list[str]) -> dict[str, Any]:
    """``{"vectors": [...], "tokens": N}``: one normalized vector per text and the texts' token count."""
    llm = engine.llm
    if llm is None or engine.embedding:
        vectors = engine.embed(texts)  # refuses when nothing is loaded
        return {"vectors": vectors, "tokens": sum(len(_tokens(engine.llm, text)) for text in texts)}
    return embed_on_chat_context(engine, texts)


def embed_on_chat_context(engine: LlamaEngine, texts: list[str]) -> dict[str, Any]:
    import llama_cpp

    llm = engine.llm
    ctx = llm._ctx.ctx
    if llama_cpp.llama_pooling_type(ctx) != llama_cpp.LLAMA_POOLING_TYPE_NONE:
        raise EngineError(ERR_BAD_INPUT, POOLED)
    tokenized = [_tokens(llm, text) for text in texts]
    _check_lengths(tokenized, int(llm.n_ctx()))
    engine._abort.clear()  # a Stop meant for an earlier reply must not abort this (as LlamaEngine.embed does)
    kept = _ChatCache.take(llm)
    llama_cpp.llama_set_embeddings(ctx, True)
    try:
        vectors = [_mean_vector(llm, tokens) for tokens in tokenized]
    finally:
        llama_cpp.llama_set_embeddings(ctx, False)
        kept.put_back(llm)
    return {"vectors": vectors, "tokens": sum(map(len, tokenized))}


def _tokens(llm: Any, text: str) -> list[int]:
    """The tokens ``Llama.embed`` evaluates for ``text`` (its BOS as the model wants it, no special tokens)."""
    return list(llm.tokenize(text.encode("utf-8")))


def _check_lengths(tokenized: list[list[int]], n_ctx: int) -> None:
    for tokens in tokenized:
        if not tokens:
            raise EngineError(ERR_BAD_INPUT, "A text to embed has no tokens; send text that is not empty.")
        if len(tokens) > n_ctx:
            raise EngineError(
                ERR_PROMPT_TOO_LONG,
                f"A text to embed has {len(tokens):,} tokens; this model takes {n_ctx:,} at most as loaded. Split "
                "the text, or load the model with a larger context.",
            )


def _mean_vector(llm: Any, tokens: list[int]) -> list[float]:
    """Decode ``tokens`` alone (a cleared cache, positions from 0) and mean-pool their hidden states."""
    import llama_cpp
    import numpy as np

    ctx, n_embd = llm._ctx.ctx, int(llm.n_embd())
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), False)
    total = np.zeros(n_embd, dtype=np.float64)
    step = max(1, min(CHUNK, int(llm.n_batch)))
    for start in range(0, len(tokens), step):
        part = tokens[start : start + step]
        llm._batch.set_batch(part, start, True)  # every token an output
        code = llama_cpp.llama_decode(ctx, llm._batch.batch)
        if code != 0:
            raise EngineError(ERR_GENERATION, f"llama.cpp could not evaluate a text to embed (llama_decode {code}).")
        rows = np.ctypeslib.as_array(llama_cpp.llama_get_embeddings(ctx), shape=(len(part) * n_embd,))
        total += rows.reshape(len(part), n_embd).sum(axis=0)
    mean = total / len(tokens)
    norm = float(np.linalg.norm(mean))
    return [float(x) for x in (mean / norm if norm > 0 else mean)]


class _ChatCache:
    """The chat's sequence in the KV cache, copied out before an embedding and put back after it."""

    def __init__(self, data: ctypes.Array[ctypes.c_uint8] | None) -> None:
        self._data = data

    @classmethod
    def take(cls, llm: Any) -> _ChatCache:
        import llama_cpp

        ctx = llm._ctx.ctx
        if llm.n_tokens == 0:
            return cls(None)
        size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
        if size > KEEP_CACHE_MAX:
            return cls(None)
        data = (ctypes.c_uint8 * size)()
        if int(llama_cpp.llama_state_seq_get_data(ctx, data, size, 0)) != size:
            return cls(None)
        return cls(data)

    def put_back(self, llm: Any) -> None:
        """The chat's cache as it was, or (none kept, or it would not go back) an empty one the next chat fills."""
        import llama_cpp

        ctx = llm._ctx.ctx
        memory = llama_cpp.llama_get_memory(ctx)
        llama_cpp.llama_memory_clear(memory, False)
        restored = self._data is not None and llama_cpp.llama_state_seq_set_data(ctx, self._data, len(self._data), 0)
        if not restored:
            llama_cpp.llama_memory_clear(memory, False)
            llm.reset()
        llm._requires_eval = True  # the context's logits are the embedding's now: the next reply decodes first
