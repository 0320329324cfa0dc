"""A header-only GGUF reader: metadata and tensor layout without touching tensor data.

Reading is a linear walk of the header; arrays of strings (vocabularies) are skipped, not decoded,
so the time does not depend on the file size and barely on the vocabulary size.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF value types
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY, _UINT64, _INT64, _FLOAT64 = range(13)
_SCALAR_FORMATS = {
    _UINT8: "<B", _INT8: "<b", _UINT16: "<H", _INT16: "<h", _UINT32: "<I", _INT32: "<i",
    _FLOAT32: "<f", _BOOL: "<?", _UINT64: "<Q", _INT64: "<q", _FLOAT64: "<d",
}  # fmt: skip
# Arrays longer than this keep only their length (vocabularies, merges, token types).
_MAX_KEPT_ARRAY = 64


class GgufFileError(ValueError):
    """The file is not a usable GGUF; the message says why and what to do."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    n_bytes: int


@dataclass
class GgufHeader:
    path: Path
    version: int
    file_size: int
    metadata: dict[str, Any] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    data_start: int = 0

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return str(value) if value is not None else None

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name") or self.path.stem)

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return str(value) if value else None

    def arch_value(self, key: str) -> Any:
        return self.metadata.get(f"{self.architecture}.{key}")

    @property
    def context_length(self) -> int | None:
        value = self.arch_value("context_length")
        return int(value) if value is not None else None

    @property
    def block_count(self) -> int | None:
        value = self.arch_value("block_count")
        return int(value) if value is not None else None

    @property
    def data_end(self) -> int:
        return self.data_start + max((t.offset + t.n_bytes for t in self.tensors), default=0)


def read_gguf_header(path: str | Path) -> GgufHeader:
    """Read and check a GGUF header; raises GgufFileError with a clear reason when it is unusable."""
    path = Path(path)
    if not path.is_file():
        raise GgufFileError(f"{path} does not exist or is not a file. Choose a .gguf model file.")
    size = path.stat().st_size
    with path.open("rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise GgufFileError(f"{path.name} is not a GGUF model file. Choose a .gguf file (llama.cpp format).")
        try:
            header = _read_after_magic(f, path, size)
        except (struct.error, UnicodeDecodeError, MemoryError, OverflowError) as exc:
            raise GgufFileError(
                f"{path.name} is damaged or truncated: its header cannot be read ({exc}). Download it again."
            ) from exc
    if header.data_end > size:
        raise GgufFileError(
            f"{path.name} is truncated: it has {size:,} bytes but its tensors need {header.data_end:,}. "
            "The download was probably interrupted; download it again."
        )
    return header


def _read_after_magic(f: BinaryIO, path: Path, size: int) -> GgufHeader:
    version = _unpack(f, "<I")
    if version not in (2, 3):
        raise GgufFileError(f"{path.name} uses GGUF version {version}, which this app cannot read.")
    n_tensors, n_kv = _unpack(f, "<Q"), _unpack(f, "<Q")
    if n_tensors > 1_000_000 or n_kv > 1_000_000:
        raise GgufFileError(f"{path.name} has an implausible header (damaged file). Download it again.")
    header = GgufHeader(path=path, version=version, file_size=size)
    for _ in range(n_kv):
        key = _read_string(f)
        value_type = _unpack(f, "<I")
        if value_type == _ARRAY:
            value, length = _read_array(f)
            header.array_lengths[key] = length
            if value is not None:
                header.metadata[key] = value
        else:
            header.metadata[key] = _read_value(f, value_type)
    header.tensors = [_read_tensor_info(f) for _ in range(n_tensors)]
    alignment = int(header.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
    header.data_start = -(-f.tell() // alignment) * alignment
    return header


def _unpack(f: BinaryIO, fmt: str) -> Any:
    raw = f.read(struct.calcsize(fmt))
    return struct.unpack(fmt, raw)[0]


def _read_string(f: BinaryIO) -> str:
    length = _unpack(f, "<Q")
    if length > 1 << 26:
        raise struct.error(f"string of {length} bytes")
    raw = f.read(length)
    if len(raw) != length:
        raise struct.error("unexpected end of file")
    return raw.decode("utf-8")


def _read_value(f: BinaryIO, value_type: int) -> Any:
    if value_type == _STRING:
        return _read_string(f)
    fmt = _SCALAR_FORMATS.get(value_type)
    if fmt is None:
        raise struct.error(f"unknown GGUF value type {value_type}")
    return _unpack(f, fmt)


def _read_array(f: BinaryIO) -> tuple[list[Any] | None, int]:
    item_type, length = _unpack(f, "<I"), _unpack(f, "<Q")
    if length <= _MAX_KEPT_ARRAY:
        return [_read_value(f, item_type) for _ in range(length)], length
    if item_type == _STRING:
        for _ in range(length):
            f.seek(_unpack(f, "<Q"), 1)
    elif item_type in _SCALAR_FORMATS:
        f.seek(struct.calcsize(_SCALAR_FORMATS[item_type]) * length, 1)
    else:
        raise struct.error(f"unsupported array item type {item_type}")
    return None, length


def _read_tensor_info(f: BinaryIO) -> TensorInfo:
    name = _read_string(f)
    n_dims = _unpack(f, "<I")
    shape = tuple(_unpack(f, "<Q") for _ in range(n_dims))
    ggml_type, offset = _unpack(f, "<I"), _unpack(f, "<Q")
    return TensorInfo(name, shape, ggml_type, offset, tensor_nbytes(shape, ggml_type))


def tensor_nbytes(shape: tuple[int, ...], ggml_type: int) -> int:
    """Bytes a tensor of this shape and GGML type occupies."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    n_elements = 1
    for dim in shape:
        n_elements *= dim
    return n_elements // block_size * type_size
