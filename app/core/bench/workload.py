"""The fixed, seeded workload of ``bench run`` and the Bench panel.

One configuration (an engine at one concurrency) runs like this:

1. **Warm-up**: ``warmup`` short requests (``WARMUP_MAX_TOKENS`` tokens each), not counted, so no configuration
   pays for a cold engine, an empty prefix cache or lazy start-up work.
2. **Measured set**: ``requests`` prompts, run ``repetitions`` times, by ``concurrency`` closed-loop clients
   (each client sends its next request the moment its previous reply ends), every reply ``max_tokens`` long
   where the engine can be told to ignore end-of-sequence (vLLM ``ignore_eos``; Ollama and llama.cpp stop at
   EOS if the model emits one, which the token counts then show).
3. **Prompts**: a mix of lengths, in words of a fixed vocabulary: ``prompt_words`` lengths drawn with
   ``prompt_weights`` (default 24 words 50 %, 96 words 30 %, 384 words 20 %), shuffled with ``seed``. The same
   seed gives the same prompt bodies, in the same order, on every machine and engine; request ``i`` also
   samples with seed ``seed + i`` at temperature 0 (greedy), so replies are reproducible.
4. **Run tag**: each measured prompt starts with the line ``[run <nonce> c<N> r<k>]`` (``nonce``: random per
   run, recorded in the result's workload; ``N``: the concurrency; ``k``: the repetition), then
   ``Request <i>: continue this text.`` and the seeded body. No level, repetition or later run on the same
   live server can reuse another's prompt prefix cache (vLLM V1 caches prefixes), so each pays its own prompt
   processing. The same seed and nonce give the same prompts.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

WARMUP_MAX_TOKENS = 8
DEFAULT_CONCURRENCIES = (1, 8, 16, 32, 64)
MAX_CONCURRENCY = 1024
_TEXT = (
    "the river mountain story harbor lantern garden market winter letter journey bridge forest engine city "
    "morning village library clock ocean valley window road kitchen storm island silver careful quiet ancient "
    "north field painter orchard candle meadow tower signal keeper voyage whisper granite summer autumn"
)
_VOCABULARY = tuple(_TEXT.split(" "))


@dataclass(frozen=True)
class BenchWorkload:
    """What every configuration of one bench run executes; see the module text for the exact procedure."""

    concurrencies: tuple[int, ...] = DEFAULT_CONCURRENCIES
    requests: int = 64
    max_tokens: int = 128
    warmup: int = 2
    repetitions: int = 1
    seed: int = 1234
    prompt_words: tuple[int, ...] = (24, 96, 384)
    prompt_weights: tuple[float, ...] = (0.5, 0.3, 0.2)
    temperature: float = 0.0
    nonce: str = ""  # the run's tag in every measured prompt; ``with_nonce`` gives a fresh one

    def with_nonce(self) -> BenchWorkload:
        """This workload with a fresh random ``nonce`` when it has none (each run measures uncached prompts)."""
        return self if self.nonce else replace(self, nonce=secrets.token_hex(4))

    def problems(self) -> list[str]:
        """What is wrong with these settings, in words that say what to change; empty when it can run."""
        found = []
        if not self.concurrencies:
            found.append("Give at least one concurrency level (e.g. 1,8,32).")
        if any(c < 1 or c > MAX_CONCURRENCY for c in self.concurrencies):
            found.append(f"Each concurrency must be between 1 and {MAX_CONCURRENCY}.")
        if self.requests < 1:
            found.append("The number of requests must be at least 1.")
        if self.max_tokens < 1:
            found.append("Max tokens must be at least 1.")
        if self.warmup < 0 or self.repetitions < 1:
            found.append("Warm-up must be 0 or more and repetitions at least 1.")
        if not self.prompt_words or any(w < 1 for w in self.prompt_words):
            found.append("Prompt lengths must be whole numbers of words, at least 1.")
        if len(self.prompt_weights) != len(self.prompt_words) or any(w < 0 for w in self.prompt_weights):
            found.append("Give one non-negative weight per prompt length.")
        elif not sum(self.prompt_weights):
            found.append("At least one prompt length needs a weight above 0.")
        return found

    def prompts(self, concurrency: int = 1, repetition: int = 1) -> list[str]:
        """The ``requests`` measured prompts of one level and repetition: the run tag (see the module text),
        then the seeded body, the same for every level and run. Same seed and nonce: the same list everywhere."""
        rng = random.Random(self.seed)
        lengths = rng.choices(self.prompt_words, weights=self.prompt_weights, k=self.requests)
        tag = " ".join(part for part in ("run", self.nonce, f"c{concurrency}", f"r{repetition}") if part)
        return [f"[{tag}]\n{_prompt(i, n, rng)}" for i, n in enumerate(lengths)]

    def warmup_prompts(self) -> list[str]:
        rng = random.Random(self.seed - 1)
        return [_prompt(i, min(self.prompt_words), rng, "Warm-up") for i in range(self.warmup)]

    def request_seed(self, index: int) -> int:
        return self.seed + index

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["warmup_max_tokens"] = WARMUP_MAX_TOKENS
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchWorkload:
        names = {f.name for f in fields(cls)}
        known: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names}
        return cls(**known)


def _prompt(index: int, words: int, rng: random.Random, label: str = "Request") -> str:
    body = " ".join(rng.choice(_VOCABULARY) for _ in range(words))
    return f"{label} {index}: continue this text. {body}"


def parse_concurrencies(text: str) -> tuple[int, ...]:
    """``"1,8, 32"`` → ``(1, 8, 32)`` (sorted, duplicates dropped); ValueError with a readable message."""
    return parse_levels(text, "concurrency", MAX_CONCURRENCY)


def parse_levels(text: str, what: str, maximum: int) -> tuple[int, ...]:
    """A comma-separated list of whole numbers from 1 to ``maximum``, sorted; ValueError naming ``what``."""
    parts = [p.strip() for p in text.replace(" ", ",").split(",") if p.strip()]
    try:
        levels = sorted({int(p) for p in parts})
    except ValueError:
        raise ValueError(f"{what} must be a list of whole numbers like 1,8,32, not {text!r}") from None
    if not levels:
        raise ValueError(f"give at least one {what}, e.g. 1,8,32")
    if levels[0] < 1 or levels[-1] > maximum:
        raise ValueError(f"each {what} must be between 1 and {maximum}, not {text!r}")
    return tuple(levels)
