"""A draft model for speculative decoding: a second, small ``Llama`` with the target's tokenizer, drafting greedily.

``SmallModelDrafter`` has the call shape of llama-cpp-python's ``LlamaDraftModel`` (input ids in, draft ids out;
``Llama.generate`` only calls it). Its context follows the target's tokens: each call keeps the prefix its KV
cache shares with the input ids, evaluates the rest, then drafts up to ``max_tokens`` tokens, one at a time, taking
the most likely each time; the drafts the target rejects are rolled back by the next call's common prefix.
Only the worker imports this module; ``llama_cpp`` is imported on first use.
"""

from __future__ import annotations

from typing import Any

DRAFT_TOKENS = 6  # drafted per proposal: with the sampled token, 7 rows (speculation.INVARIANT_ROWS)


def load_draft_llama(path: str, kwargs: dict[str, Any]) -> Any:
    """The draft model, loaded with ``kwargs`` (the target's context size, batch and offload)."""
    import llama_cpp

    return llama_cpp.Llama(model_path=path, **kwargs)


class SmallModelDrafter:
    def __init__(self, llm: Any, max_tokens: int = DRAFT_TOKENS) -> None:
        self._llm = llm
        self.max_tokens = max_tokens
        self._n_vocab = int(llm.n_vocab())

    def __call__(self, input_ids: Any, /, **_kwargs: Any) -> Any:
        import numpy as np

        llm = self._llm
        count = min(self.max_tokens, int(llm.n_ctx()) - len(input_ids))
        if count <= 0 or len(input_ids) == 0:
            return np.array([], dtype=np.intc)
        self._catch_up(input_ids)
        drafts: list[int] = []
        for _ in range(count):
            token = self._most_likely()
            drafts.append(token)
            if len(drafts) == count or self._ends_text(token):
                break
            llm.eval([token])
        return np.array(drafts, dtype=np.intc)

    def _catch_up(self, input_ids: Any) -> None:
        """Evaluate what the draft's context lacks of ``input_ids``: all after their common prefix (at least the
        last token, whose logits the first draft needs)."""
        llm = self._llm
        cached = llm.input_ids[: llm.n_tokens]
        shared = min(len(cached), len(input_ids) - 1)
        differs = (cached[:shared] != input_ids[:shared]).nonzero()[0]
        keep = int(differs[0]) if len(differs) else shared
        llm.n_tokens = keep  # eval drops the cache from here on
        llm.eval(input_ids[keep:].tolist())

    def _most_likely(self) -> int:
        import llama_cpp
        import numpy as np

        pointer = llama_cpp.llama_get_logits_ith(self._llm._ctx.ctx, -1)
        return int(np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)).argmax())

    def _ends_text(self, token: int) -> bool:
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self._llm._model.vocab, token))
