"""Can GGUF model D draft for GGUF model M? Compared from the two headers only (speculative decoding needs the
draft to speak the target's tokenizer: same vocabulary size, same special token ids, same token strings)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.gguf.header import GgufFileError, GgufHeader, read_array_items, read_gguf_header
from app.core.gguf.projector import is_projector, looks_like_projector_name

__all__ = ["DraftVerdict", "check_draft", "check_draft_headers"]

_TOKENS_KEY = "tokenizer.ggml.tokens"
_SPECIAL = ("bos", "eos", "eot", "pad", "unk")
SAMPLE_SIZE = 64


@dataclass(frozen=True)
class DraftVerdict:
    ok: bool
    reason: str = ""  # the failed check, in words ("" when ok)


def check_draft(draft: str | Path, model: str | Path) -> DraftVerdict:
    """Read both headers (tensor data is never read) and compare their tokenizers."""
    draft, model = Path(draft), Path(model)
    if looks_like_projector_name(draft.name):
        return DraftVerdict(False, "it is a projector (mmproj) file, not a language model")
    try:
        if draft.resolve() == model.resolve():
            return DraftVerdict(False, "it is the model itself")
        draft_header = read_gguf_header(draft)
        model_header = read_gguf_header(model)
        return check_draft_headers(draft_header, model_header)
    except GgufFileError as exc:
        return DraftVerdict(False, f"its header cannot be read: {exc}")


def check_draft_headers(draft: GgufHeader, model: GgufHeader) -> DraftVerdict:
    if is_projector(draft):
        return DraftVerdict(False, "it is a projector (clip) file, not a language model")
    draft_size, model_size = _vocab_size(draft), _vocab_size(model)
    if not draft_size or not model_size:
        return DraftVerdict(False, "a vocabulary is missing from its header")
    if draft_size != model_size:
        return DraftVerdict(False, f"vocabulary size differs: {draft_size} vs {model_size}")
    for kind in _SPECIAL:
        key = f"tokenizer.ggml.{kind}_token_id"
        ours, theirs = model.metadata.get(key), draft.metadata.get(key)
        if ours is not None and theirs is not None and ours != theirs:
            return DraftVerdict(False, f"{kind.upper()} token id differs: {theirs} vs {ours}")
    indices = _sample_indices(model_size)
    draft_tokens, model_tokens = _tokens(draft, indices), _tokens(model, indices)
    for index in sorted(indices):
        if draft_tokens.get(index) != model_tokens.get(index):
            return DraftVerdict(
                False,
                f"token {index} differs: {draft_tokens.get(index)!r} vs {model_tokens.get(index)!r}",
            )
    return DraftVerdict(True)


def _vocab_size(header: GgufHeader) -> int:
    return int(header.array_lengths.get(_TOKENS_KEY, 0))


def _sample_indices(size: int) -> set[int]:
    """About SAMPLE_SIZE evenly spaced ids, always the first and the last."""
    step = max(1, size // SAMPLE_SIZE)
    return set(range(0, size, step)) | {size - 1}


def _tokens(header: GgufHeader, indices: set[int]) -> dict[int, Any]:
    kept = header.metadata.get(_TOKENS_KEY)
    if isinstance(kept, list):
        return {i: kept[i] for i in indices if i < len(kept)}
    return read_array_items(header.path, header, _TOKENS_KEY, indices)
