"""What a GGUF file is: architecture, size, quantization, context, attention shape, tokenizer, template,
sliding window, provenance and split files, from its header alone (``inspect_gguf`` / ``model_info``)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.core.gguf.header import GgufFileError, GgufHeader, ggml_type_name, read_array_items, read_gguf_header
from app.core.memory.estimate import sliding_layers

# llama.cpp's llama_ftype names (general.file_type); 0/1 are all-F32 / mostly-F16.
FILE_TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
    36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4",
}  # fmt: skip
_SPLIT_RE = re.compile(r"^(?P<base>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_TOKENS_KEY = "tokenizer.ggml.tokens"


@dataclass(frozen=True)
class SplitFiles:
    index: int  # 1-based
    count: int
    paths: tuple[str, ...]
    missing: tuple[str, ...]
    total_bytes: int  # sum over the shards present

    @property
    def complete(self) -> bool:
        return not self.missing


@dataclass(frozen=True)
class ModelInfo:
    path: str
    file_size: int
    gguf_version: int
    architecture: str | None
    name: str
    basename: str | None
    size_label: str | None
    author: str | None
    license: str | None
    parameter_count: int
    file_type: str | None  # from general.file_type, e.g. "Q4_K_M"
    dominant_tensor_type: str | None  # the tensor type holding the most bytes, e.g. "Q4_K"
    tensor_bytes: int
    context_length: int | None
    block_count: int | None
    embedding_length: int | None
    feed_forward_length: int | None
    head_count: int | list[int] | None
    head_count_kv: int | list[int] | None
    key_length: int | None
    value_length: int | None
    vocab_size: int | None
    tokenizer_model: str | None
    bos_token_id: int | None
    eos_token_id: int | None
    bos_token: str | None
    eos_token: str | None
    chat_template: str | None
    rope_freq_base: float | None
    rope_dimension_count: int | None
    rope_scaling_type: str | None
    rope_scaling_factor: float | None
    sliding_window: int | None
    sliding_layers: tuple[int, ...]  # indices of the layers that use the sliding window
    split: SplitFiles | None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["sliding_layers"] = list(self.sliding_layers)
        if self.split is not None:
            data["split"]["complete"] = self.split.complete
        return data


def inspect_gguf(path: str | Path) -> ModelInfo:
    """Read a GGUF's header and describe it; raises GgufFileError for a missing or damaged file. Blocking."""
    header = read_gguf_header(path)
    return model_info(header, token_texts=_token_texts(header))


def model_info(header: GgufHeader, *, token_texts: dict[int, str] | None = None) -> ModelInfo:
    """Describe a parsed header. BOS/EOS texts come from the header's short token list, or ``token_texts``."""
    meta, arch = header.metadata, header.arch_value
    bos_id, eos_id = _int(meta.get("tokenizer.ggml.bos_token_id")), _int(meta.get("tokenizer.ggml.eos_token_id"))
    texts = dict(token_texts or {})
    tokens = meta.get(_TOKENS_KEY)
    if isinstance(tokens, list):
        texts.update({i: str(tokens[i]) for i in (bos_id, eos_id) if i is not None and 0 <= i < len(tokens)})
    n_layer = header.block_count
    n_swa = _int(arch("attention.sliding_window"))
    swa = sliding_layers(header, n_layer or 0, n_swa or 0)
    return ModelInfo(
        path=str(header.path),
        file_size=header.file_size,
        gguf_version=header.version,
        architecture=header.architecture,
        name=header.name,
        basename=_str(meta.get("general.basename")),
        size_label=_str(meta.get("general.size_label")),
        author=_str(meta.get("general.author") or meta.get("general.organization")),
        license=_str(meta.get("general.license")),
        parameter_count=sum(t.n_elements for t in header.tensors),
        file_type=FILE_TYPE_NAMES.get(meta["general.file_type"]) if "general.file_type" in meta else None,
        dominant_tensor_type=_dominant_type(header),
        tensor_bytes=sum(t.n_bytes for t in header.tensors),
        context_length=header.context_length,
        block_count=n_layer,
        embedding_length=_int(arch("embedding_length")),
        feed_forward_length=_int_or_list(arch("feed_forward_length")),  # type: ignore[arg-type]
        head_count=_int_or_list(arch("attention.head_count")),
        head_count_kv=_int_or_list(arch("attention.head_count_kv")),
        key_length=_int(arch("attention.key_length")),
        value_length=_int(arch("attention.value_length")),
        vocab_size=header.array_lengths.get(_TOKENS_KEY) or _int(arch("vocab_size")),
        tokenizer_model=_str(meta.get("tokenizer.ggml.model")),
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        bos_token=texts.get(bos_id) if bos_id is not None else None,
        eos_token=texts.get(eos_id) if eos_id is not None else None,
        chat_template=header.chat_template,
        rope_freq_base=_float(arch("rope.freq_base")),
        rope_dimension_count=_int(arch("rope.dimension_count")),
        rope_scaling_type=_str(arch("rope.scaling.type")),
        rope_scaling_factor=_float(arch("rope.scaling.factor")),
        sliding_window=n_swa,
        sliding_layers=tuple(i for i, is_swa in enumerate(swa) if is_swa),
        split=split_files(header.path),
    )


def _token_texts(header: GgufHeader) -> dict[int, str]:
    """BOS/EOS token texts, re-read from the (skipped) vocabulary: one pass over its start."""
    ids = {_int(header.metadata.get(f"tokenizer.ggml.{k}_token_id")) for k in ("bos", "eos")}
    wanted = {i for i in ids if i is not None}
    if not wanted or _TOKENS_KEY not in header.array_offsets:
        return {}
    try:
        return {i: str(v) for i, v in read_array_items(header.path, header, _TOKENS_KEY, wanted).items()}
    except GgufFileError:
        return {}


def _dominant_type(header: GgufHeader) -> str | None:
    by_type: Counter[int] = Counter()
    for tensor in header.tensors:
        by_type[tensor.ggml_type] += tensor.n_bytes
    return ggml_type_name(by_type.most_common(1)[0][0]) if by_type else None


def split_files(path: Path) -> SplitFiles | None:
    """For ``name-00001-of-00003.gguf``: the sibling shards, which are missing, and the size of those present."""
    match = _SPLIT_RE.match(path.name)
    if match is None:
        return None
    count = int(match["count"])
    paths = [path.with_name(f"{match['base']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    present = [p for p in paths if p.is_file()]
    return SplitFiles(
        index=int(match["index"]),
        count=count,
        paths=tuple(str(p) for p in paths),
        missing=tuple(str(p) for p in paths if p not in present),
        total_bytes=sum(p.stat().st_size for p in present),
    )


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None


def _int_or_list(value: Any) -> int | list[int] | None:
    if isinstance(value, list):
        return [int(v) for v in value]
    return _int(value)
