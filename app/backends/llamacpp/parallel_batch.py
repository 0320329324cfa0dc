"""The batched llama.cpp context of the parallel engine: ``slots`` KV streams of ``n_ctx_per_seq`` cells each
(``n_seq_max = slots``, ``kv_unified = False``: every sequence gets the full context it asks for, none is split
from another's), on a model already loaded. One ``decode`` runs every row the scheduler put in the batch; logits
are asked only for rows that sample (a sequence's last prompt token, a decoding sequence's token)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

Row = tuple[int, int, int, bool]  # (token, position, sequence id, wants logits)


@dataclass(frozen=True)
class BatchSettings:
    slots: int
    n_ctx_per_seq: int
    n_batch: int = 512
    n_threads: int | None = None
    flash_attn: bool = False
    type_k: int | None = None  # GGML type ids; None: f16
    type_v: int | None = None


class BatchContext:
    def __init__(self, llama_cpp: Any, model: Any, settings: BatchSettings) -> None:
        import numpy as np

        self._np, self._l, self.settings = np, llama_cpp, settings
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = settings.n_ctx_per_seq * settings.slots
        params.n_batch = params.n_ubatch = settings.n_batch
        params.n_seq_max = settings.slots
        params.kv_unified = False
        params.swa_full = True  # sliding-window layers keep the whole context: a cached prefix can be trimmed
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if settings.flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        if settings.type_k is not None:
            params.type_k = settings.type_k
        if settings.type_v is not None:
            params.type_v = settings.type_v
        # A batched decode step has several tokens, so llama.cpp runs it with n_threads_batch: both get the decode
        # thread count (llama-cpp-python's default, half the cores), not all cores (oversubscribed, its spinning
        # threads stall each other: measured 64 ms → 350+ ms a step on 2 busy cores).
        threads = settings.n_threads or max((os.cpu_count() or 2) // 2, 1)
        params.n_threads = params.n_threads_batch = threads
        self.ctx = llama_cpp.llama_init_from_model(model, params)
        if not self.ctx:
            raise RuntimeError(
                f"llama.cpp could not create a context of {settings.slots} × {settings.n_ctx_per_seq:,} tokens "
                "(too little memory? use fewer parallel sequences or a smaller context)"
            )
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_ctx_per_seq = int(llama_cpp.llama_n_ctx(self.ctx)) // settings.slots
        self._batch = llama_cpp.llama_batch_init(settings.n_batch, 0, 1)

    def close(self) -> None:
        self._l.llama_batch_free(self._batch)
        self._l.llama_free(self.ctx)

    def decode(self, rows: list[Row]) -> None:
        batch = self._batch
        for i, (token, pos, seq_id, logits) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq_id, logits
        batch.n_tokens = len(rows)
        code = self._l.llama_decode(self.ctx, batch)
        if code != 0:
            raise RuntimeError(f"llama_decode failed (code {code})")

    def logits(self, row: int) -> Any:
        """A numpy view of ``row``'s logits (valid until the next decode)."""
        pointer = self._l.llama_get_logits_ith(self.ctx, row)
        return self._np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))

    def cells(self, seq_id: int) -> int:
        """Cells sequence ``seq_id`` holds (its positions 0..max)."""
        return int(self._l.llama_memory_seq_pos_max(self.memory, seq_id)) + 1

    def trim(self, seq_id: int, keep: int) -> bool:
        """Keep the first ``keep`` positions of ``seq_id``; False when llama.cpp cannot cut there (then all go)."""
        if self._l.llama_memory_seq_rm(self.memory, seq_id, keep, -1):
            return True
        self._l.llama_memory_seq_rm(self.memory, seq_id, -1, -1)
        return False

    def copy(self, src: int, dst: int) -> None:
        """Copy all of ``src``'s cells to ``dst`` (across KV streams llama.cpp copies whole streams only)."""
        self._l.llama_memory_seq_rm(self.memory, dst, -1, -1)
        self._l.llama_memory_seq_cp(self.memory, src, dst, -1, -1)
