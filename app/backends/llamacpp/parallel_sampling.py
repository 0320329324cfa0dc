"""Per-sequence sampling for the parallel engine: a llama.cpp sampler chain built from a request's settings.

Temperature 0 (or below) is greedy. Without penalties that is the argmax of the sequence's logits read with numpy,
which is cheaper than llama.cpp's greedy sampler (that one first copies the whole vocabulary — 262k entries on
Gemma 3 — into a candidate array); with a repeat, frequency or presence penalty it is penalties → greedy, as
llama-cpp-python samples at temperature 0 (the penalties see the reply's own tokens, the last ``repeat_last_n``:
the chain accepts each token it samples). Otherwise the chain is penalties → top-k → typical → top-p → min-p →
temperature → a seeded draw, in llama-cpp-python's order; each step reads only the sequence's own output row.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repeat_last_n: int = 64
    seed: int | None = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> SamplingSettings:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names and v is not None})

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @property
    def penalised(self) -> bool:
        return self.repeat_penalty != 1.0 or bool(self.frequency_penalty) or bool(self.presence_penalty)


class SeqSampler:
    """Samples one sequence's next token from its row of the batch's logits; ``close()`` frees the chain."""

    def __init__(self, llama_cpp: Any, settings: SamplingSettings, n_vocab: int) -> None:
        self._l = llama_cpp
        self.settings = settings
        self._chain = None if settings.greedy and not settings.penalised else _chain(llama_cpp, settings, n_vocab)

    def sample(self, ctx: Any, row: int, logits_row: Any) -> int:
        """``row``: the token's index in the batch; ``logits_row``: a numpy view of its logits (greedy reads it)."""
        if self._chain is None:
            return int(logits_row.argmax())
        return int(self._l.llama_sampler_sample(self._chain, ctx, row))

    def close(self) -> None:
        if self._chain is not None:
            self._l.llama_sampler_free(self._chain)
            self._chain = None


def _chain(l: Any, s: SamplingSettings, n_vocab: int) -> Any:  # noqa: E741 (llama_cpp: the calls read as its)
    chain = l.llama_sampler_chain_init(l.llama_sampler_chain_default_params())
    add = l.llama_sampler_chain_add
    if s.penalised:
        add(chain, _penalties(l, s, n_vocab))
    if s.greedy:
        add(chain, l.llama_sampler_init_greedy())
        return chain
    if s.top_k > 0:
        add(chain, l.llama_sampler_init_top_k(s.top_k))
    if 0 < s.typical_p < 1:
        add(chain, l.llama_sampler_init_typical(s.typical_p, 1))
    if 0 < s.top_p < 1:
        add(chain, l.llama_sampler_init_top_p(s.top_p, 1))
    if s.min_p > 0:
        add(chain, l.llama_sampler_init_min_p(s.min_p, 1))
    add(chain, l.llama_sampler_init_temp(s.temperature))
    seed = s.seed if s.seed is not None else secrets.randbits(32)
    add(chain, l.llama_sampler_init_dist(seed & 0xFFFFFFFF))
    return chain


def _penalties(l: Any, s: SamplingSettings, n_vocab: int) -> Any:  # noqa: E741
    """The penalties sampler made exactly as llama-cpp-python makes it for the single worker
    (``LlamaSampler.add_penalties``: ``n_vocab, penalty_last_n, repeat, freq, present``), so both engines penalise
    the same tokens. Measured: made as ``(repeat_last_n, 0, …)`` it penalised nothing in this build (the same greedy
    text with penalties 1.0 and 1.3), while the worker's text changed."""
    return l.llama_sampler_init_penalties(n_vocab, s.repeat_last_n, s.repeat_penalty, s.frequency_penalty,
                                          s.presence_penalty)  # fmt: skip
