"""Validators for every path piece that comes from remote data (a Hub answer, an Ollama manifest, the queue file).

A mirror (any ``HF_ENDPOINT``) chooses file names, commit ids and digests; the app turns them into paths. Each
validator returns the value when it is safe as one piece of a path under its root and raises ``RemotePathError``
otherwise, naming the value and what is wrong with it. ``inside`` is the final resolve-and-compare check.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import InvalidInputError

SHOWN_CHARS = 80  # of a refused value's repr, in messages
MAX_NAME_CHARS = 1024  # a repository file path (the Hub allows far less per component)
MAX_FILE_BYTES = 1 << 50  # 1 PiB: a listed size above this is not a real file
COMMIT_RE = re.compile(r"[0-9a-f]{40}")
_BLOB_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a git object id (sha1, or sha256 repositories)
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_REPO_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")
_OLLAMA_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")
_OLLAMA_PIECE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,349}")
_DRIVE = re.compile(r"[A-Za-z]:")


@dataclass(frozen=True)
class Origin:
    """Who gave a value, for the message: "<source> gave <noun> <value>, which <problem>; refusing it (<hint>)"."""

    source: str
    hint: str


SERVER = Origin("the server", "is HF_ENDPOINT a mirror you trust?")
QUEUE = Origin("the download queue", "it was edited or damaged: remove this download and queue it again")
USER = Origin("you", "check the spelling")
OLLAMA = Origin("Ollama's store", "remove the model with `ollama rm` and pull it again")


class RemotePathError(InvalidInputError):
    """A value from remote data that would make an unsafe path (or is not what its field must be)."""


def shown(value: object) -> str:
    """``repr(value)``, cut to ``SHOWN_CHARS`` in the middle (the start and the end of a path tell the most)."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    head = (SHOWN_CHARS - 1) * 2 // 3
    return text[:head] + "…" + text[head + 1 - SHOWN_CHARS :]


def refuse(origin: Origin, noun: str, value: object, problem: str) -> RemotePathError:
    return RemotePathError(f"{origin.source} gave {noun} {shown(value)}, which {problem}; refusing it ({origin.hint})")


def _text_problem(value: str) -> str | None:
    """What makes ``value`` unusable in a path, whatever its kind: NUL, control characters, backslashes."""
    if "\0" in value:
        return "contains a NUL byte"
    if any(unicodedata.category(c) == "Cc" for c in value):
        return "contains a control character"
    if "\\" in value:
        return "contains a backslash (a folder separator on Windows)"
    return None


def _relative_problem(value: str, where: str) -> str | None:
    """Why ``value``, a relative POSIX path, is not safe below its root (None when it is)."""
    if not value:
        return "is empty"
    if problem := _text_problem(value):
        return problem
    if value.startswith("/") or _DRIVE.match(value):
        return f"is an absolute path and would be written outside {where}"
    segments = value.split("/")
    if ".." in segments:
        return f"would be written outside {where}"
    if "." in segments or "" in segments:
        return "has an empty or '.' path segment"
    return None


def repo_file(value: object, origin: Origin = SERVER, *, where: str = "the download folder") -> str:
    """A file path inside a repository (``sub/dir/x.gguf``): relative, POSIX, no ``..`` or ``.`` segments."""
    if not isinstance(value, str):
        raise refuse(origin, "a file named", value, "is not a text string")
    problem = _relative_problem(value, where)
    if problem is None and len(value) > MAX_NAME_CHARS:
        problem = f"is longer than {MAX_NAME_CHARS} characters"
    if problem:
        raise refuse(origin, "a file named", value, problem)
    return value


def commit_id(value: object, origin: Origin = SERVER) -> str:
    """A full git commit id: 40 lowercase hexadecimal characters (it names the snapshot folder)."""
    if not isinstance(value, str) or not COMMIT_RE.fullmatch(value):
        raise refuse(origin, "the commit id", value, "is not 40 lowercase hexadecimal characters")
    return value


def revision(value: object, origin: Origin = USER) -> str:
    """A branch, tag, ``refs/pr/<n>`` or commit id (the cache keeps it under ``refs/``)."""
    if not isinstance(value, str):
        raise refuse(origin, "the revision", value, "is not a text string")
    problem = _relative_problem(value, "the cache's refs folder")
    if problem is None and len(value) > 255:
        problem = "is longer than 255 characters"
    if problem:
        raise refuse(origin, "the revision", value, problem)
    return value


def repo_id(value: object, origin: Origin = SERVER) -> str:
    """``owner/name`` (or a bare ``name``) with the Hub's characters: letters, digits, ``_ . -``; no ``--``/``..``."""
    if not isinstance(value, str):
        raise refuse(origin, "the repository id", value, "is not a text string")
    parts = value.split("/")
    if len(parts) > 2 or not all(_REPO_PART.fullmatch(p) for p in parts):
        problem = "is not owner/name made of letters, digits, '_', '.' and '-'"
    elif "--" in value or ".." in value:
        problem = "contains '--' or '..'"
    elif value.endswith(".git"):
        problem = "ends with '.git'"
    else:
        return value
    raise refuse(origin, "the repository id", value, problem)


def sha256_hex(value: object, origin: Origin = SERVER) -> str | None:
    """An LFS sha256 (it names the blob in the cache), lowercased; None stays None."""
    if value is None:
        return None
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise refuse(origin, "the sha256", value, "is not 64 hexadecimal characters")
    return value.lower()


def blob_id(value: object, origin: Origin = SERVER) -> str | None:
    """A git blob id (it names a small file's blob in the cache); None stays None."""
    if value is None:
        return None
    if not isinstance(value, str) or not _BLOB_ID.fullmatch(value):
        raise refuse(origin, "the blob id", value, "is not a 40- or 64-character lowercase hexadecimal id")
    return value


def file_size(value: object, origin: Origin = SERVER, *, name: str = "") -> int | None:
    """A listed file size: None, or a whole number of bytes from 0 to ``MAX_FILE_BYTES``."""
    if value is None:
        return None
    noun = f"the size of {shown(name)} as" if name else "the file size"
    if isinstance(value, bool) or not isinstance(value, int):
        raise refuse(origin, noun, value, "is not a whole number of bytes")
    if not 0 <= value <= MAX_FILE_BYTES:
        raise refuse(origin, noun, value, f"is not between 0 and {MAX_FILE_BYTES:,} bytes")
    return value


def ollama_digest(value: object, origin: Origin = OLLAMA) -> str:
    """``sha256:<64 hex>`` (or ``sha256-``) → the 64 hex characters that name the blob."""
    match = _OLLAMA_DIGEST.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise refuse(origin, "the digest", value, "is not sha256:<64 lowercase hexadecimal characters>")
    return match.group(1)


def ollama_name_piece(value: object, origin: Origin = OLLAMA) -> str:
    """One piece of an Ollama model name (host, namespace, model or tag): letters, digits, ``_ . : -``."""
    if not isinstance(value, str) or not _OLLAMA_PIECE.fullmatch(value) or ".." in value:
        raise refuse(origin, "the model name part", value, "is not letters, digits, '_', '.', ':' and '-'")
    return value


def inside(root: Path, candidate: Path) -> Path:
    """``candidate`` with its folder resolved, when that folder is ``root`` (resolved) or below it.

    The last component is not followed: it may be a link the caller replaces. Raises ``RemotePathError``."""
    if candidate.name in ("", ".", ".."):
        raise RemotePathError(f"the path {shown(str(candidate))} does not name a file; refusing to write there")
    for text in (str(root), str(candidate)):
        if "\0" in text:
            raise RemotePathError(f"the path {shown(text)} contains a NUL byte; refusing to write there")
    base = root.resolve()
    folder = candidate.parent.resolve()
    if folder != base and base not in folder.parents:
        raise RemotePathError(
            f"the path {shown(str(candidate))} leads outside {base} (through a link or '..'); refusing to write "
            "there (remove the link, or choose another folder)"
        )
    return folder / candidate.name
