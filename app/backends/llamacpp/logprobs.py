"""Per-token log-probabilities on llama.cpp without ``logits_all``.

llama-cpp-python gives logprobs only for a ``Llama`` created with ``logits_all=True``, which keeps a float for
every vocabulary entry at every context position (n_ctx × n_vocab: gigabytes for a 32k context and a 150k
vocabulary) and copies all of them on every batch, slowing prompt processing for every request. Instead the
app reads the logits of the position that was just sampled (``llama_get_logits_ith(ctx, -1)``, still in the
context when the token is handed out) and takes the log-softmax itself: the same numbers, only when a request
asks, for any model as loaded. They are the model's own distribution, before temperature, top-k or a grammar.
"""

from __future__ import annotations

from typing import Any


class LogprobRecorder:
    """Call ``record(token)`` as each token is sampled; ``take()`` returns the entries since the last take, in
    OpenAI's shape: ``{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}``."""

    def __init__(self, llm: Any, top: int) -> None:
        self._llm = llm
        self._top = top
        self._pending: list[dict[str, Any]] = []

    def record(self, token: int, row: int = -1) -> None:
        """``row``: where the logits that sampled ``token`` are in the last batch (negative: from its end)."""
        import llama_cpp
        import numpy as np

        llm = self._llm
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
            return  # the end of the reply is no part of its text
        n_vocab = llm.n_vocab()
        pointer = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, row)
        logits = np.ctypeslib.as_array(pointer, shape=(n_vocab,)).astype(np.float64)
        peak = logits.max()
        log_total = peak + np.log(np.exp(logits - peak).sum())
        entry = self._entry(token, float(logits[token] - log_total))
        top: list[dict[str, Any]] = []
        if self._top:
            count = min(self._top, n_vocab)
            best = np.argpartition(logits, -count)[-count:]
            for candidate in sorted(best.tolist(), key=lambda t: -logits[t]):
                top.append(self._entry(candidate, float(logits[candidate] - log_total)))
        entry["top_logprobs"] = top
        self._pending.append(entry)

    def take(self) -> list[dict[str, Any]]:
        taken, self._pending = self._pending, []
        return taken

    def _entry(self, token: int, logprob: float) -> dict[str, Any]:
        piece = bytes(self._llm.detokenize([token], special=True))
        return {"token": piece.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(piece)}
