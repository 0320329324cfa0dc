"""The library's persistent header cache: one JSON file of per-file summaries keyed on (size, mtime_ns).

A rescan reads a file's header again only when its size or modification time changed, so indexing a large
library after the first scan costs one ``stat`` per file. A damaged cache file is ignored (and rewritten),
never an error: it only holds what can be read again.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from app.core import safe_json
from app.services.library.files import FileStamp
from app.services.paths import open_private

log = logging.getLogger("app.services.library")
CACHE_VERSION = 3  # 2: summaries carry general_name, family and license; 3: embedding_length and projector
# ~300 bytes a model file: 256 MiB holds ~800,000 entries, far beyond a real library, yet stays bounded.
CACHE_MAX_BYTES = 256 * 1024 * 1024


class HeaderCache:
    """Summaries by path; ``get`` answers only for an unchanged file, ``save`` keeps only what was used."""

    def __init__(self, file: Path | None) -> None:
        self.file = file
        self._stored: dict[str, dict[str, Any]] = self._load()
        self._used: dict[str, dict[str, Any]] = {}
        self.hits = 0
        self.misses = 0

    def begin(self) -> None:
        """Start a scan: counts reset, and only what this scan looks up is kept by ``save``."""
        self._used = {}
        self.hits = 0
        self.misses = 0

    def _load(self) -> dict[str, dict[str, Any]]:
        if self.file is None:
            return {}
        try:
            data = safe_json.load_file(self.file, what="it", max_bytes=CACHE_MAX_BYTES)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:  # ValueError: safe_json's JsonError and UserFileError
            log.warning("The library cache %s is unreadable (%s); it will be rebuilt.", self.file, exc)
            return {}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            return {}
        files = data.get("files")
        return files if isinstance(files, dict) else {}

    def get(self, key: str, file_stamp: FileStamp) -> dict[str, Any] | None:
        record = self._stored.get(key)
        if (
            isinstance(record, dict)
            and record.get("size") == file_stamp.size_bytes
            and record.get("mtime_ns") == file_stamp.mtime_ns
            and isinstance(record.get("info"), dict)
        ):
            self._used[key] = record
            self.hits += 1
            return dict(record["info"])
        self.misses += 1
        return None

    def put(self, key: str, file_stamp: FileStamp, info: dict[str, Any]) -> None:
        self._used[key] = {"size": file_stamp.size_bytes, "mtime_ns": file_stamp.mtime_ns, "info": info}

    def save(self) -> None:
        """Write what this scan used (entries for files that are gone drop out), atomically."""
        self._stored = dict(self._used)
        if self.file is None:
            return
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            temp = self.file.with_name(self.file.name + ".tmp")
            with open_private(temp) as out:  # owner-only
                out.write(json.dumps({"version": CACHE_VERSION, "files": self._stored}))
            os.replace(temp, self.file)
        except OSError as exc:
            log.warning("Could not save the library cache %s (%s); the next scan reads headers again.", self.file, exc)
