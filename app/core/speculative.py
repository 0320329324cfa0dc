"""The speculative decoding setting of a llama.cpp load (``LoadParams.speculative``), parsed and checked:
"off", "ngram" (prompt lookup: drafts copied from the text so far, no second model) or "draft:<GGUF path>"
(a second, smaller model with the same tokenizer proposes the drafts)."""

from __future__ import annotations

from dataclasses import dataclass

OFF, NGRAM, DRAFT = "off", "ngram", "draft"
DRAFT_PREFIX = "draft:"
USAGE = 'Speculative decoding is "off", "ngram" or "draft:<path to a GGUF>"'


@dataclass(frozen=True)
class SpeculativeSetting:
    mode: str  # OFF, NGRAM or DRAFT
    draft_path: str | None = None  # DRAFT only

    @property
    def on(self) -> bool:
        return self.mode != OFF


def parse_speculative(value: str | None) -> SpeculativeSetting:
    """The setting in ``value``; raises ValueError with words that say what is accepted."""
    text = (value or OFF).strip()
    if text in (OFF, NGRAM):
        return SpeculativeSetting(text)
    if text.startswith(DRAFT_PREFIX):
        path = text[len(DRAFT_PREFIX) :].strip()
        if not path:
            raise ValueError(f"{USAGE}: give the draft model's path after 'draft:'.")
        return SpeculativeSetting(DRAFT, path)
    raise ValueError(f"{USAGE}, not {text!r}.")


def speculative_problem(value: str | None) -> str | None:
    """Why ``value`` is not a speculative setting, or None."""
    try:
        parse_speculative(value)
    except ValueError as exc:
        return str(exc)
    return None


def acceptance(drafted: int, accepted: int) -> float | None:
    """The share of draft tokens the model kept (None when nothing was drafted)."""
    return accepted / drafted if drafted else None
