"""A header-only GGUF reader: metadata and tensor layout without touching tensor data.

Reading is a linear walk of the header; arrays of strings (vocabularies) are skipped, not decoded, so the time
does not depend on the file size and barely on the vocabulary size. Every count and length is checked against
the bytes left in the file before anything is allocated or skipped, so a damaged or hostile header fails fast
with ``GgufFileError`` instead of allocating terabytes or looping for hours.

``read_gguf_header_bytes`` parses a downloaded prefix of a remote file; when the prefix ends inside the header
it raises ``GgufHeaderIncomplete`` (a ``GgufFileError``) that says how many bytes it needs.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from app.core.errors import InvalidInputError

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4

# GGUF value types
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY, _UINT64, _INT64, _FLOAT64 = range(13)
_SCALARS = {
    _UINT8: struct.Struct("<B"), _INT8: struct.Struct("<b"), _UINT16: struct.Struct("<H"),
    _INT16: struct.Struct("<h"), _UINT32: struct.Struct("<I"), _INT32: struct.Struct("<i"),
    _FLOAT32: struct.Struct("<f"), _BOOL: struct.Struct("<?"), _UINT64: struct.Struct("<Q"),
    _INT64: struct.Struct("<q"), _FLOAT64: struct.Struct("<d"),
}  # fmt: skip
_U32, _U64 = _SCALARS[_UINT32], _SCALARS[_UINT64]
# Arrays longer than this keep only their length (vocabularies, merges, token types).
_MAX_KEPT_ARRAY = 64
# Limits far above any real model, so hostile headers cannot make the walk take hours.
_MAX_COUNT = 1_000_000  # tensors, key/value pairs
_MAX_STRING_BYTES = 1 << 26  # 64 MiB (chat templates are a few KB)
_MAX_STRING_ARRAY = 1 << 22  # 4M strings (the largest vocabularies have ~1M tokens)
_MIN_KV_BYTES = 8 + 4 + 1  # empty key, type, one-byte value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # empty name, n_dims, type, offset
_CHUNK = 64 * 1024


class GgufFileError(InvalidInputError):
    """The file is not a usable GGUF; the message says why and what to do."""


class GgufHeaderIncomplete(GgufFileError):
    """The bytes given end inside the header: fetch at least ``bytes_needed`` bytes and parse again."""

    def __init__(self, message: str, *, bytes_read_so_far: int, bytes_needed: int) -> None:
        super().__init__(message)
        self.bytes_read_so_far = bytes_read_so_far
        self.bytes_needed = bytes_needed


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    n_bytes: int

    @property
    def n_elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass
class GgufHeader:
    path: Path
    version: int
    file_size: int
    metadata: dict[str, Any] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    data_start: int = 0
    # Where each skipped (long) array starts in the file (its item type field), for ``read_array_items``.
    array_offsets: dict[str, int] = field(default_factory=dict)
    # Bytes actually read from the file (the header only, never the tensor data).
    bytes_read: int = 0

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
        return int(value) if isinstance(value, int | float) else None

    @property
    def block_count(self) -> int | None:
        value = self.arch_value("block_count")
        return int(value) if isinstance(value, int | float) else None

    @property
    def data_end(self) -> int:
        return self.data_start + max((t.offset + t.n_bytes for t in self.tensors), default=0)


def read_gguf_header(path: str | Path) -> GgufHeader:
    """Read and check a GGUF header; raises GgufFileError with a clear reason when it is unusable."""
    path = Path(path)
    if not path.is_file():
        raise GgufFileError(f"{path} does not exist or is not a file. Choose a .gguf model file.")
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            header = _parse(_Cursor(b"", size, path.name, f), path, size)
    except OSError as exc:
        raise GgufFileError(
            f"{path.name} cannot be read ({exc.strerror or exc}). Check the file's permissions."
        ) from exc
    if header.data_end > size:
        raise GgufFileError(
            f"{path.name} is truncated: it has {size:,} bytes but its tensors need {header.data_end:,}. "
            "The download was probably interrupted; download it again."
        )
    return header


def read_gguf_header_bytes(data: bytes, *, name: str, file_size: int) -> GgufHeader:
    """Parse the header from the first bytes of a (remote) GGUF of ``file_size`` bytes.

    Raises ``GgufHeaderIncomplete`` when ``data`` ends inside the header (its ``bytes_needed`` says how much to
    fetch) and ``GgufFileError`` when the header is damaged or does not fit in ``file_size``.
    """
    header = _parse(_Cursor(bytes(data[:file_size]), file_size, name, None), Path(name), file_size)
    if header.data_end > file_size:
        raise GgufFileError(
            f"{name} is damaged: its tensors need {header.data_end:,} bytes but the file has {file_size:,}."
        )
    return header


def read_array_items(path: str | Path, header: GgufHeader, key: str, indices: set[int]) -> dict[int, Any]:
    """Read chosen items of a long array the header skipped (e.g. the BOS/EOS token texts).

    Walks the array from its start up to the largest index (string lengths only), so it costs one pass over
    at most that much of the header. Raises GgufFileError when the file changed or is damaged.
    """
    offset = header.array_offsets.get(key)
    length = header.array_lengths.get(key, 0)
    wanted = {i for i in indices if 0 <= i < length}
    if offset is None or not wanted:
        return {}
    path = Path(path)
    try:
        with path.open("rb") as f:
            cursor = _Cursor(b"", header.file_size, path.name, f)
            cursor.skip(offset)
            item_type, _ = cursor.unpack(_U32), cursor.unpack(_U64)
            found: dict[int, Any] = {}
            for index in range(max(wanted) + 1):
                if index in wanted:
                    found[index] = _read_value(cursor, item_type)
                else:
                    _skip_value(cursor, item_type)
            return found
    except OSError as exc:
        raise GgufFileError(f"{path.name} cannot be read ({exc.strerror or exc}).") from exc


class _Cursor:
    """Bounded reads from a file (in small chunks) or from a byte prefix; never past ``size``."""

    def __init__(self, data: bytes, size: int, name: str, file: BinaryIO | None) -> None:
        self.buf, self.buf_start, self.pos = data, 0, 0
        self.size, self.name, self.file = size, name, file
        self.bytes_read = len(data)

    @property
    def remaining(self) -> int:
        return self.size - self.pos

    def damaged(self, reason: str) -> GgufFileError:
        return GgufFileError(f"{self.name} is damaged or truncated: {reason}. Download it again.")

    def _ensure(self, n: int) -> int:
        """Make ``n`` bytes at ``pos`` available; returns their index in ``buf``."""
        end = self.pos + n
        if end > self.size:
            raise self.damaged(f"its header ends early (needs byte {end:,} of {self.size:,})")
        have_end = self.buf_start + len(self.buf)
        if end > have_end:
            if self.file is None:
                raise GgufHeaderIncomplete(
                    f"{self.name}: the first {len(self.buf):,} bytes do not hold the whole header.",
                    bytes_read_so_far=len(self.buf),
                    bytes_needed=end,
                )
            self._refill(end)
        return self.pos - self.buf_start

    def _refill(self, end: int) -> None:
        assert self.file is not None
        have_end = self.buf_start + len(self.buf)
        if self.pos >= have_end:
            self.buf, self.buf_start = b"", self.pos
        else:
            self.buf, self.buf_start = self.buf[self.pos - self.buf_start :], self.pos
        read_from = self.buf_start + len(self.buf)
        want = min(max(end - read_from, _CHUNK), self.size - read_from)
        self.file.seek(read_from)
        chunk = self.file.read(want)
        self.bytes_read += len(chunk)
        self.buf += chunk
        if self.buf_start + len(self.buf) < end:
            raise self.damaged("the file ended while its header was read")

    def read(self, n: int) -> bytes:
        start = self._ensure(n)
        self.pos += n
        return self.buf[start : start + n]

    def unpack(self, fmt: struct.Struct) -> Any:
        start = self._ensure(fmt.size)
        self.pos += fmt.size
        return fmt.unpack_from(self.buf, start)[0]

    def skip_strings(self, count: int) -> None:
        """Skip ``count`` length-prefixed strings (a vocabulary) with a tight loop over the buffer."""
        unpack_from = _U64.unpack_from
        while count:
            start = self._ensure(8)
            buf, end = self.buf, len(self.buf)
            while count and start + 8 <= end:
                length = unpack_from(buf, start)[0]
                if start + 8 + length > end:
                    break
                start += 8 + length
                count -= 1
            self.pos = self.buf_start + start
            if count:  # the next string crosses the buffer's end (or claims more than the file has)
                self.skip(self.unpack(_U64))
                count -= 1

    def skip(self, n: int) -> None:
        if n > self.remaining:
            raise self.damaged(f"a value claims {n:,} bytes but only {self.remaining:,} are left")
        self.pos += n


def _parse(cursor: _Cursor, path: Path, size: int) -> GgufHeader:
    if size < 4 or cursor.read(4) != GGUF_MAGIC:
        raise GgufFileError(f"{path.name} is not a GGUF model file. Choose a .gguf file (llama.cpp format).")
    version = cursor.unpack(_U32)
    if version not in (2, 3):
        raise GgufFileError(f"{path.name} uses GGUF version {version}, which this app cannot read.")
    n_tensors, n_kv = cursor.unpack(_U64), cursor.unpack(_U64)
    _check_count(cursor, n_kv, _MIN_KV_BYTES, "metadata entries")
    _check_count(cursor, n_tensors, _MIN_TENSOR_INFO_BYTES, "tensors")
    header = GgufHeader(path=path, version=version, file_size=size)
    for _ in range(n_kv):
        _read_kv(cursor, header)
    names: set[str] = set()
    for _ in range(n_tensors):
        tensor = _read_tensor_info(cursor)
        if tensor.name in names:
            raise cursor.damaged(f"the tensor {tensor.name!r} appears twice")
        names.add(tensor.name)
        header.tensors.append(tensor)
    alignment = header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise cursor.damaged(f"general.alignment is {alignment!r}, not a power of two")
    header.data_start = -(-cursor.pos // alignment) * alignment
    header.bytes_read = cursor.bytes_read
    return header


def _check_count(cursor: _Cursor, count: int, min_bytes: int, what: str) -> None:
    if count > _MAX_COUNT or count * min_bytes > cursor.remaining:
        raise cursor.damaged(f"the header claims {count:,} {what}, more than the file can hold")


def _read_kv(cursor: _Cursor, header: GgufHeader) -> None:
    key = _read_string(cursor)
    if key in header.metadata or key in header.array_lengths:
        raise cursor.damaged(f"the metadata key {key!r} appears twice")
    value_type = cursor.unpack(_U32)
    if value_type != _ARRAY:
        header.metadata[key] = _read_value(cursor, value_type)
        return
    start = cursor.pos
    item_type, length = cursor.unpack(_U32), cursor.unpack(_U64)
    header.array_lengths[key] = length
    if item_type == _ARRAY:
        raise cursor.damaged(f"{key} is an array of arrays, which GGUF does not allow")
    item_bytes = 8 if item_type == _STRING else _scalar(cursor, item_type).size
    if length * item_bytes > cursor.remaining or (item_type == _STRING and length > _MAX_STRING_ARRAY):
        raise cursor.damaged(f"{key} claims {length:,} items, more than the file can hold")
    if length <= _MAX_KEPT_ARRAY:
        header.metadata[key] = [_read_value(cursor, item_type) for _ in range(length)]
        return
    header.array_offsets[key] = start
    if item_type == _STRING:
        cursor.skip_strings(length)
    else:
        cursor.skip(item_bytes * length)


def _scalar(cursor: _Cursor, value_type: int) -> struct.Struct:
    fmt = _SCALARS.get(value_type)
    if fmt is None:
        raise cursor.damaged(f"it has an unknown GGUF value type {value_type}")
    return fmt


def _read_string(cursor: _Cursor) -> str:
    length = cursor.unpack(_U64)
    if length > cursor.remaining or length > _MAX_STRING_BYTES:
        raise cursor.damaged(f"a string claims {length:,} bytes")
    try:
        return cursor.read(length).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise cursor.damaged(f"a string is not valid UTF-8 ({exc.reason})") from exc


def _read_value(cursor: _Cursor, value_type: int) -> Any:
    if value_type == _STRING:
        return _read_string(cursor)
    return cursor.unpack(_scalar(cursor, value_type))


def _skip_value(cursor: _Cursor, value_type: int) -> None:
    if value_type == _STRING:
        cursor.skip(cursor.unpack(_U64))
    else:
        cursor.skip(_scalar(cursor, value_type).size)


def _read_tensor_info(cursor: _Cursor) -> TensorInfo:
    name = _read_string(cursor)
    n_dims = cursor.unpack(_U32)
    if not 1 <= n_dims <= GGML_MAX_DIMS:
        raise cursor.damaged(f"the tensor {name!r} has {n_dims} dimensions")
    shape = tuple(cursor.unpack(_U64) for _ in range(n_dims))
    ggml_type, offset = cursor.unpack(_U32), cursor.unpack(_U64)
    sizes = _quant_sizes()
    if ggml_type not in sizes:
        raise GgufFileError(
            f"{cursor.name}: the tensor {name!r} uses GGML type {ggml_type}, which this app does not know. "
            "The file may be damaged or need a newer llama.cpp."
        )
    block_size, type_size = sizes[ggml_type]
    n_elements = 1
    for dim in shape:
        n_elements *= dim
    if shape[0] % block_size or n_elements.bit_length() > 62:
        raise cursor.damaged(f"the tensor {name!r} has an impossible shape {shape}")
    return TensorInfo(name, shape, ggml_type, offset, n_elements // block_size * type_size)


@functools.cache
def _quant_sizes() -> dict[int, tuple[int, int]]:
    from gguf import GGML_QUANT_SIZES

    return {int(kind): sizes for kind, sizes in GGML_QUANT_SIZES.items()}


def ggml_type_name(ggml_type: int) -> str:
    """The GGML type's name, e.g. 1 → "F16", 12 → "Q4_K"."""
    from gguf import GGMLQuantizationType

    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"type {ggml_type}"


def ggml_row_bytes(ggml_type: int, n_elements: int) -> int:
    """Bytes of ``n_elements`` values of a GGML type (a whole number of blocks)."""
    block_size, type_size = _quant_sizes()[ggml_type]
    return n_elements // block_size * type_size
