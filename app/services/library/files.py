"""File-level helpers for the model library: a safe folder walk and header-only summaries.

The walk survives what real disks hold: folders it may not read, symlink loops, files that vanish between
listing and reading. Summaries read headers only (a GGUF's metadata and tensor table, a safetensors file's
8-byte length and JSON header), never tensor data, so their cost does not grow with the model's size.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.core import safe_json
from app.core.gguf.header import GgufFileError, GgufHeader, read_gguf_header
from app.core.gguf.projector import is_projector, projector_facts

# Above safe_json's 16 MiB on purpose: the safetensors library itself (the reader vLLM and transformers use)
# accepts JSON headers up to 100,000,000 bytes, so a file they load must list here too. Real headers are a few
# MB at most; the length is checked before anything is read, and nesting is still refused by safe_json.
MAX_SAFETENSORS_HEADER_BYTES = 100_000_000
SKIPPED_DIR_NAMES = frozenset({".git", "__pycache__", ".cache", "node_modules"})


@dataclass
class WalkReport:
    """What a walk could not enter, as one sentence per folder (shown with the library, never a crash)."""

    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FileStamp:
    size_bytes: int
    mtime_ns: int


def stamp(path: Path) -> FileStamp | None:
    """Size and modification time (following symlinks); None when the file is gone or unreadable."""
    try:
        st = path.stat()
    except OSError:
        return None
    return FileStamp(st.st_size, st.st_mtime_ns)


def walk_folders(
    root: Path, report: WalkReport, *, max_depth: int = 8
) -> Iterator[tuple[Path, list[os.DirEntry[str]]]]:
    """Yield (folder, its entries) under ``root``, following folder symlinks once (loops are cut).

    A folder that cannot be listed is reported in ``report`` and skipped, with its subtree.
    """
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            st = folder.stat()
            key = (st.st_dev, st.st_ino)
            if key in seen:
                continue  # a symlink loop, or a second link to a folder already indexed
            seen.add(key)
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except PermissionError:
            report.problems.append(f"Cannot read {folder}: permission denied. Check its permissions or remove it.")
            continue
        except OSError as exc:  # vanished, a symlink loop the OS refused, a dead mount
            if folder == root or not isinstance(exc, FileNotFoundError):
                report.problems.append(f"Cannot read {folder}: {exc.strerror or exc}.")
            continue
        yield folder, entries
        if depth >= max_depth:
            continue
        for entry in reversed(entries):
            if entry.name in SKIPPED_DIR_NAMES or entry.name.startswith("."):
                continue
            try:
                is_dir = entry.is_dir()  # follows symlinks; the seen-set cuts loops
            except OSError:
                continue
            if is_dir:
                stack.append((Path(entry.path), depth + 1))


# --- GGUF ---------------------------------------------------------------------------------------------------------


def gguf_summary(path: Path) -> dict[str, Any]:
    """The library's facts about one GGUF, from its header only; ``error`` is set when the file is unusable."""
    try:
        header = read_gguf_header(path)
    except GgufFileError as exc:
        return {"error": str(exc)}
    except OSError as exc:
        return {"error": f"Cannot read {path.name}: {exc.strerror or exc}."}
    return summary_from_header(header)


def summary_from_header(header: GgufHeader) -> dict[str, Any]:
    meta = header.metadata
    width = header.arch_value("embedding_length")
    return {
        "name": header.name,
        "general_name": _text(meta.get("general.name")),
        "family": _text(meta.get("general.basename")) or header.architecture,
        "license": _text(meta.get("general.license")),
        "architecture": header.architecture,
        "parameter_count": parameter_count(header),
        "parameters_declared": isinstance(header.metadata.get("general.parameter_count"), int),
        "quantization": quantization_name(header),
        "context_length": header.context_length,
        "embedding_length": width if isinstance(width, int) else None,
        "projector": asdict(projector_facts(header)) if is_projector(header) else None,
        "error": None,
    }


def _text(value: object) -> str | None:
    return (value.strip() or None) if isinstance(value, str) else None


def parameter_count(header: GgufHeader) -> int | None:
    """Elements over all tensors (what "7B" counts), or the metadata's own count when it has one."""
    declared = header.metadata.get("general.parameter_count")
    if isinstance(declared, int) and declared > 0:
        return declared
    total = 0
    for tensor in header.tensors:
        n = 1
        for dim in tensor.shape:
            n *= dim
        total += n
    return total or None


def quantization_name(header: GgufHeader) -> str | None:
    """``general.file_type`` as llama.cpp names it (``Q4_K_M``, ``F16``); None when the file does not say."""
    file_type = header.metadata.get("general.file_type")
    if file_type is None:
        return None
    from gguf import LlamaFileType

    try:
        name = LlamaFileType(int(file_type)).name
    except ValueError:
        return f"type {file_type}"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


# --- safetensors --------------------------------------------------------------------------------------------------


def safetensors_parameter_count(path: Path) -> int:
    """Parameters in one safetensors file from its header (8-byte length, then JSON); tensor data is not read.

    Raises ValueError with a readable reason when the header is damaged.
    """
    with path.open("rb") as f:
        raw_length = f.read(8)
        if len(raw_length) != 8:
            raise ValueError(f"{path.name} is too short to be a safetensors file.")
        (length,) = struct.unpack("<Q", raw_length)
        if length > MAX_SAFETENSORS_HEADER_BYTES:
            raise ValueError(f"{path.name} has an implausible header size ({length:,} bytes): the file is damaged.")
        raw = f.read(length)
    if len(raw) != length:
        raise ValueError(f"{path.name} is truncated: its header is incomplete. Download it again.")
    try:
        header = safe_json.loads_object(raw, what="its JSON header", max_bytes=MAX_SAFETENSORS_HEADER_BYTES)
        return _parameters(header)
    except (ValueError, TypeError) as exc:  # JsonError (malformed, nested), or a shape that is not a list of ints
        raise ValueError(f"{path.name} has a damaged header ({exc}). Download it again.") from exc


def _parameters(header: dict[str, Any]) -> int:
    total = 0
    for name, tensor in header.items():
        if name == "__metadata__" or not isinstance(tensor, dict):
            continue
        n = 1
        for dim in tensor.get("shape", []):
            n *= int(dim)
        total += n
    return total
