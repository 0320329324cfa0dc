"""Quantization names and split-GGUF shards, parsed from file names as published on the Hub.

GGUF repositories name files like ``Qwen2.5-7B-Instruct-Q4_K_M.gguf`` or, for files over the Hub's 50 GB
limit, ``model-Q8_0-00001-of-00003.gguf`` (llama.cpp's ``gguf-split`` naming). ``group_gguf_files`` turns a
repository's file list into one candidate per quantization, with its shards grouped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_QUANT_RE = re.compile(
    r"(?<![A-Z0-9])(?:UD-)?("
    r"I?Q\d(?:_[A-Z0-9]{1,3})*"  # Q4_K_M, Q8_0, IQ4_XS, IQ2_XXS, Q4_0_4_4, Q2_K_XL
    r"|TQ\d_\d|MXFP4|BF16|FP16|F16|F32"
    r")(?![A-Z0-9])"
)
_SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})(\.gguf)$", re.IGNORECASE)

# Spellings of the same float type, folded to the name llama.cpp uses.
_FLOAT_NAMES = {"FP16": "F16"}


@dataclass(frozen=True)
class SplitInfo:
    """``-00002-of-00005.gguf``: shard 2 (1-based) of 5; ``base`` is the name without that suffix."""

    index: int
    count: int
    base: str


@dataclass(frozen=True)
class HubFile:
    """One file of a repository as the Hub lists it."""

    path: str
    size_bytes: int | None = None
    sha256: str | None = None  # the LFS sha256; None for small files stored in git
    blob_id: str | None = None  # the git blob id (the ETag of a small file)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class GgufCandidate:
    """One downloadable GGUF model: a single file or all shards of a split file, in shard order."""

    key: str  # the path without the split suffix
    quant: str | None
    files: tuple[HubFile, ...]
    shard_count: int  # shards the names announce (1 for a single file)
    is_projector: bool  # a multimodal projector (mmproj), not a model by itself

    @property
    def size_bytes(self) -> int | None:
        sizes = [f.size_bytes for f in self.files]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    @property
    def complete(self) -> bool:
        """Whether every announced shard is listed."""
        return len(self.files) == self.shard_count

    def to_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "quant": self.quant,
            "files": [f.path for f in self.files],
            "size_bytes": self.size_bytes,
            "shard_count": self.shard_count,
            "complete": self.complete,
            "is_projector": self.is_projector,
        }


def parse_quant(file_name: str) -> str | None:
    """The quantization in a GGUF file name, upper-cased (``Q4_K_M``, ``IQ4_XS``, ``BF16``), or None."""
    stem = file_name.rsplit("/", 1)[-1]
    stem = _SPLIT_RE.sub(r"\3", stem)
    if stem.lower().endswith(".gguf"):
        stem = stem[: -len(".gguf")]
    matches = _QUANT_RE.findall(stem.upper())
    if not matches:
        return None
    quant = str(matches[-1])  # the last match: names like "Q4-model-Q8_0" end with the real one
    return _FLOAT_NAMES.get(quant, quant)


def parse_split(file_name: str) -> SplitInfo | None:
    """The shard number and count of a split GGUF (``-00001-of-00003.gguf``), or None for a single file."""
    match = _SPLIT_RE.search(file_name)
    if match is None:
        return None
    index, count = int(match.group(1)), int(match.group(2))
    if index < 1 or count < 1 or index > count:
        return None
    return SplitInfo(index=index, count=count, base=file_name[: match.start()] + match.group(3))


def same_quant(a: str | None, b: str) -> bool:
    """Whether quantization name ``a`` is the one a user asked for (``q4_k_m`` matches ``Q4_K_M``)."""
    return a is not None and a.upper() == b.strip().upper()


def group_gguf_files(files: Iterable[HubFile]) -> list[GgufCandidate]:
    """One candidate per GGUF model in ``files``: shards of a split file grouped, sorted by size then name."""
    groups: dict[str, list[tuple[int, HubFile]]] = {}
    counts: dict[str, int] = {}
    for hub_file in files:
        if not hub_file.path.lower().endswith(".gguf"):
            continue
        split = parse_split(hub_file.path)
        key = split.base if split else hub_file.path
        groups.setdefault(key, []).append((split.index if split else 1, hub_file))
        counts[key] = max(counts.get(key, 1), split.count if split else 1)
    candidates = [
        GgufCandidate(
            key=key,
            quant=parse_quant(key),
            files=tuple(f for _, f in sorted(members, key=lambda m: m[0])),
            shard_count=counts[key],
            is_projector="mmproj" in key.lower(),
        )
        for key, members in groups.items()
    ]
    return sorted(candidates, key=lambda c: (c.is_projector, c.size_bytes or 0, c.key))


_PROJECTOR_PRECISION = ("F16", "BF16", "F32")


def matching_projector(candidates: Iterable[GgufCandidate], model_quant: str | None) -> GgufCandidate | None:
    """The projector (mmproj) to download with a model of ``model_quant`` from a repository's ``candidates``:
    full precision first (F16, as most repositories recommend: a quantized projector costs image quality for
    little memory), then the model's own quantization, then the largest; None when the repository has none."""
    projectors = [c for c in candidates if c.is_projector and c.complete]
    if not projectors:
        return None

    def rank(c: GgufCandidate) -> tuple[int, int]:
        quant = (c.quant or "").upper()
        if quant in _PROJECTOR_PRECISION:
            order = _PROJECTOR_PRECISION.index(quant)
        elif model_quant and quant == model_quant.upper():
            order = len(_PROJECTOR_PRECISION)
        else:
            order = len(_PROJECTOR_PRECISION) + 1
        return order, -(c.size_bytes or 0)

    return min(projectors, key=rank)
