"""Discover's picks: popular small and medium GGUF models, shipped with the app (``app/resources/discover_picks.json``)
with the header fields the memory estimate needs, so "fits this machine" works offline; refreshed from the Hub when
it can be reached (``refresh_picks``).

A pick's header is rebuilt from those fields (``Pick.header``): the architecture's shapes give every weight matrix,
their types follow the file's quantization, and the byte counts are scaled so the weights add up to the published
file size. The estimate then runs on it exactly as on a downloaded file's header.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from app.core import safe_json
from app.core.errors import InvalidInputError
from app.core.gguf.header import GgufHeader, TensorInfo, ggml_row_bytes
from app.core.gguf.inspect import FILE_TYPE_NAMES
from app.core.memory.estimate import EstimateSettings
from app.core.memory.fit import FITS, TIGHT, WONT_FIT, FitVerdict, MachineMemory, fit_verdict
from app.core.params import LoadParams
from app.services.engines.embedding_slot import ENCODER_ARCHITECTURES

log = logging.getLogger("app.services.picks")
PICKS_RESOURCE = "discover_picks.json"
PICKS_MAX_BYTES = 1 << 20
HEADER_BYTES_PER_TOKEN = 25  # the vocabulary's share of a GGUF header (token texts, scores, types)
# The main weight type of a file type (general.file_type); K-quant files keep the output matrix in Q6_K.
_MAIN_TYPE = {
    "F32": "F32", "F16": "F16", "BF16": "BF16", "Q8_0": "Q8_0", "Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q5_0": "Q5_0",
    "Q5_1": "Q5_1", "Q2_K": "Q2_K", "Q3_K_S": "Q3_K", "Q3_K_M": "Q3_K", "Q3_K_L": "Q3_K", "Q4_K_S": "Q4_K",
    "Q4_K_M": "Q4_K", "Q5_K_S": "Q5_K", "Q5_K_M": "Q5_K", "Q6_K": "Q6_K", "IQ4_XS": "IQ4_XS", "IQ4_NL": "IQ4_NL",
}  # fmt: skip
_RANK = {FITS: 0, TIGHT: 1, WONT_FIT: 2}


class PicksError(InvalidInputError):
    """The picks file is not usable; the message says what is wrong with it."""


@dataclass(frozen=True)
class Pick:
    """One curated model file: where it is on the Hub, what it is, and the shape its estimate needs."""

    name: str
    repo_id: str
    file: str
    size_bytes: int
    license: str
    summary: str
    metadata: dict[str, Any]  # GGUF keys: general.architecture, general.file_type, {arch}.block_count …
    vocab_size: int
    tied_embeddings: bool
    weight_type: str | None = None  # the matrices' type; default: the file type's main type
    embedding_type: str | None = None  # token_embd's type; default: the weight type
    output_type: str | None = None  # an untied output matrix's type; default: Q6_K for K-quants

    @property
    def architecture(self) -> str:
        return str(self.metadata["general.architecture"])

    @property
    def quant(self) -> str:
        return FILE_TYPE_NAMES.get(int(self.metadata.get("general.file_type", -1)), "unknown")

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return int(value) if isinstance(value, int) else None

    def header(self) -> GgufHeader:
        """A header with this model's metadata and weight matrices, their bytes scaled to the file's size."""
        tensors = _tensors(self)
        natural = sum(t.n_bytes for t in tensors)
        target = max(self.size_bytes - self.header_bytes, self.size_bytes // 2)  # a file smaller than its figures
        factor = target / natural if natural else 1.0
        scaled = [replace(t, n_bytes=round(t.n_bytes * factor)) for t in tensors]
        header = GgufHeader(
            path=Path(self.file),
            version=3,
            file_size=self.size_bytes,
            metadata=dict(self.metadata),
            array_lengths={"tokenizer.ggml.tokens": self.vocab_size},
            tensors=scaled,
            data_start=self.header_bytes,
        )
        return header

    @property
    def header_bytes(self) -> int:
        return HEADER_BYTES_PER_TOKEN * self.vocab_size + (64 << 10)

    def natural_weight_bytes(self) -> int:
        """The weights' bytes from the shapes and types alone (before scaling): a check on the figures."""
        return sum(t.n_bytes for t in _tensors(self))


@dataclass(frozen=True)
class PickList:
    as_of: str
    note: str
    picks: tuple[Pick, ...] = field(default=())


@dataclass(frozen=True)
class PickVerdict:
    """A pick and how it fits this machine (``problem`` set when it cannot be estimated)."""

    pick: Pick
    verdict: FitVerdict | None
    problem: str | None = None

    @property
    def rank(self) -> int:
        return _RANK[self.verdict.state] if self.verdict is not None else 3


def load_picks(data: bytes | None = None) -> PickList:
    """The shipped picks (or those in ``data``); raises PicksError for a file that is not a valid list."""
    if data is None:
        data = resources.files("app.resources").joinpath(PICKS_RESOURCE).read_bytes()
    try:
        document = safe_json.loads_object(data, what="the picks file", max_bytes=PICKS_MAX_BYTES)
        return PickList(
            as_of=str(document.get("as_of", "")),
            note=str(document.get("note", "")),
            picks=tuple(_pick(item) for item in document["picks"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, PicksError):
            raise
        raise PicksError(f"The picks file is damaged ({type(exc).__name__}: {exc}); reinstall the app.") from exc


def _pick(item: Any) -> Pick:
    if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
        raise PicksError("A pick is not an object with metadata; reinstall the app.")
    pick = Pick(
        name=str(item["name"]),
        repo_id=str(item["repo"]),
        file=str(item["file"]),
        size_bytes=int(item["size_bytes"]),
        license=str(item.get("license", "")),
        summary=str(item.get("summary", "")),
        metadata=dict(item["metadata"]),
        vocab_size=int(item["vocab_size"]),
        tied_embeddings=bool(item["tied_embeddings"]),
        weight_type=item.get("weight_type"),
        embedding_type=item.get("embedding_type"),
        output_type=item.get("output_type"),
    )
    for key in ("block_count", "embedding_length", "attention.head_count", "context_length"):
        if not isinstance(pick.metadata.get(f"{pick.architecture}.{key}"), int):
            raise PicksError(f"The pick {pick.name} has no {pick.architecture}.{key}; reinstall the app.")
    return pick


def estimate_settings(load: LoadParams, machine: MachineMemory) -> EstimateSettings:
    """The estimate's settings from the app's load settings (all layers on a GPU when there is one)."""
    gpu_layers = load.n_gpu_layers if load.n_gpu_layers is not None else (-1 if machine.gpu_names else 0)
    return EstimateSettings(
        n_ctx=load.n_ctx,
        n_gpu_layers=gpu_layers,
        type_k=load.type_k,
        type_v=load.type_v,
        flash_attn=load.flash_attn,
        n_batch=max(load.n_batch, 512),
        cpu_amx=machine.cpu_amx,
    )


def rank_picks(
    picks: tuple[Pick, ...] | list[Pick], settings: EstimateSettings, machine: MachineMemory
) -> list[PickVerdict]:
    """Each pick's fits verdict on ``machine``; those that fit first, then tight, then too large (the curated
    order kept within each group). Pure arithmetic: no file, no network."""
    verdicts = []
    for pick in picks:
        try:
            verdicts.append(PickVerdict(pick, fit_verdict(pick.header(), settings, machine)))
        except (ValueError, KeyError, TypeError) as exc:  # an estimate error names what the figures lack
            log.warning("No estimate for the pick %s: %s", pick.name, exc)
            verdicts.append(PickVerdict(pick, None, str(exc)))
    return sorted(verdicts, key=lambda v: v.rank)


def refresh_picks(picks: tuple[Pick, ...], service: Any) -> tuple[list[Pick], dict[str, Any]]:
    """The picks as the Hub lists them now (sizes updated; a file gone from its repository dropped), and each
    repository's detail by repo id. Blocking; raises the first HubError of reason "network" (the Hub cannot be
    reached: keep the shipped picks)."""
    from app.services.downloads.hub import HubError

    fresh: list[Pick] = []
    details: dict[str, Any] = {}
    for pick in picks:
        try:
            detail = details.get(pick.repo_id) or service.repo_detail(pick.repo_id, with_card=False)
        except HubError as exc:
            if exc.reason == "network":
                raise
            log.info("The pick %s is not on the Hub as listed (%s); it is left out.", pick.name, exc)
            continue
        details[pick.repo_id] = detail
        hub_file = detail.file(pick.file)
        if hub_file is None:
            log.info("The pick %s: %s has no file %s any more; it is left out.", pick.name, pick.repo_id, pick.file)
            continue
        fresh.append(replace(pick, size_bytes=hub_file.size_bytes or pick.size_bytes))
    return fresh, details


# --- the header's tensors ----------------------------------------------------------------------------------------


def _type_id(name: str) -> int:
    from gguf import GGMLQuantizationType

    try:
        return int(GGMLQuantizationType[name])
    except KeyError:
        raise PicksError(f"Unknown tensor type {name!r} in the picks file; reinstall the app.") from None


def _tensors(pick: Pick) -> list[TensorInfo]:
    """token_embd, the output matrix (when not tied), and per layer the attention and feed-forward matrices and
    norms, with llama.cpp's names and shapes (ne0 first). An encoder (BERT and its kin: an embedding model) has
    learned positions and no gate matrix."""
    meta, arch = pick.metadata, pick.architecture

    def value(key: str, default: int = 0) -> int:
        found = meta.get(f"{arch}.{key}", default)
        return int(max(found) if isinstance(found, list) else found)

    n_layer, n_embd = value("block_count"), value("embedding_length")
    n_head = value("attention.head_count")
    n_kv = value("attention.head_count_kv", n_head)
    head_k = value("attention.key_length", n_embd // n_head)
    head_v = value("attention.value_length", head_k)
    n_ff = value("feed_forward_length", 4 * n_embd)
    main = pick.weight_type or _MAIN_TYPE.get(pick.quant, "Q8_0")
    weight, embedding = _type_id(main), _type_id(pick.embedding_type or main)
    output = _type_id(pick.output_type or ("Q6_K" if "_K" in pick.quant else main))
    f32 = _type_id("F32")
    tensors = [
        _tensor("token_embd.weight", (n_embd, pick.vocab_size), embedding),
        _tensor("output_norm.weight", (n_embd,), f32),
    ]
    if not pick.tied_embeddings:
        tensors.append(_tensor("output.weight", (n_embd, pick.vocab_size), output))
    encoder = arch in ENCODER_ARCHITECTURES
    if encoder:
        tensors.append(_tensor("position_embd.weight", (n_embd, value("context_length")), embedding))
    layer_shapes = {
        "attn_norm": ((n_embd,), f32),
        "attn_q": ((n_embd, n_head * head_k), weight),
        "attn_k": ((n_embd, n_kv * head_k), weight),
        "attn_v": ((n_embd, n_kv * head_v), weight),
        "attn_output": ((n_head * head_v, n_embd), weight),
        "ffn_norm": ((n_embd,), f32),
        "ffn_gate": ((n_embd, n_ff), weight),
        "ffn_up": ((n_embd, n_ff), weight),
        "ffn_down": ((n_ff, n_embd), weight),
    }
    if encoder:
        del layer_shapes["ffn_gate"]
    for layer in range(n_layer):
        tensors += [_tensor(f"blk.{layer}.{name}.weight", shape, kind) for name, (shape, kind) in layer_shapes.items()]
    return tensors


def _tensor(name: str, shape: tuple[int, ...], ggml_type: int) -> TensorInfo:
    elements = 1
    for dim in shape:
        elements *= dim
    return TensorInfo(name, shape, ggml_type, 0, ggml_row_bytes(ggml_type, elements))
