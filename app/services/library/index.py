"""The local model library: GGUFs in the model folders, the Hugging Face cache and Ollama's store, plus
Hugging Face-format folders vLLM can serve.

``ModelLibrary.scan()`` is blocking (call it off the Qt thread). It reads headers only, and only for files
whose (size, mtime_ns) changed since the last scan (a persistent cache), so a rescan of an unchanged library
costs one ``stat`` per file. Files that break (unreadable, truncated, not a GGUF) are listed with their error.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from app.core.errors import ErrorKind, InvalidInputError
from app.core.gguf.inspect import split_files
from app.core.gguf.projector import ProjectorFacts, choose, looks_like_vision_model, search_folders
from app.core.gguf.quant_names import parse_split
from app.core.settings import Settings
from app.services.library.cache import HeaderCache
from app.services.library.files import FileStamp, WalkReport, gguf_summary, stamp, walk_folders
from app.services.library.hf_cache import (
    hf_hub_cache_dir,
    is_model_folder_listing,
    model_folder_stamp,
    model_folder_summary,
    scan_hf_cache,
)
from app.services.library.names import model_display_name
from app.services.library.ollama_store import ollama_models_dir, scan_ollama_store
from app.services.paths import AppPaths

log = logging.getLogger("app.services.library")


class EntryKind(StrEnum):
    """What a library entry is, and so which engine runs it (``BACKEND_BY_KIND``)."""

    GGUF = "gguf"  # one GGUF file (a split GGUF: its first shard)
    HF = "hf"  # a Hugging Face-format folder (config.json and safetensors)


class EntrySource(StrEnum):
    """Where the library found an entry."""

    FOLDER = "folder"  # a models folder the user added
    HF_CACHE = "hf-cache"
    OLLAMA = "ollama"  # Ollama's own store (manifests and blobs)


KIND_GGUF, KIND_HF = EntryKind.GGUF, EntryKind.HF
SOURCE_FOLDER, SOURCE_HF_CACHE, SOURCE_OLLAMA = EntrySource.FOLDER, EntrySource.HF_CACHE, EntrySource.OLLAMA
BACKEND_BY_KIND = {KIND_GGUF: "llama.cpp", KIND_HF: "vLLM"}
Progress = Callable[[int, str], None]  # (files looked at so far, the current path)


def human_count(n: int | None) -> str:
    """Parameters as model cards write them: ``7.2B``, ``270M``, ``52K``; "" when unknown."""
    if not n:
        return ""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return str(n)


class LibraryError(InvalidInputError):
    """An action on the library was refused; the message says why and what to do instead. Kind: invalid input
    (not the library's to delete), not found (gone since the scan) or unavailable (the delete failed)."""


@dataclass(frozen=True)
class LibraryEntry:
    """One model: a GGUF file or a Hugging Face-format folder. ``error`` set: listed, but unusable."""

    path: str
    name: str
    kind: EntryKind
    source: EntrySource
    architecture: str | None = None
    parameter_count: int | None = None
    quantization: str | None = None
    size_bytes: int = 0
    context_length: int | None = None
    error: str | None = None
    repo_id: str | None = None  # the HF repository, for the HF cache
    root: str = ""  # the library root it was found under
    family: str | None = None  # general.basename (``gemma-3``), else the architecture
    license: str | None = None  # general.license
    vision: bool = False  # reads images: a GGUF paired with its projector, an HF folder with a vision config
    projector: str | None = None  # the GGUF's projector (mmproj) file
    projector_problem: str | None = None  # what is missing or wrong with its projector, in words
    projector_bytes: int = 0
    embedding_length: int | None = None  # what a projector's output must match

    @property
    def backend(self) -> str:
        return BACKEND_BY_KIND[self.kind]

    @property
    def file_name(self) -> str:
        """The file (or folder) name: secondary text under the model's name."""
        return Path(self.path).name

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["backend"] = self.backend
        return data


@dataclass(frozen=True)
class LibraryRoots:
    folders: tuple[Path, ...] = ()
    hf_cache: Path | None = None
    ollama: Path | None = None
    optional: frozenset[Path] = frozenset()  # folders the app creates when needed: missing is not a problem

    @classmethod
    def from_settings(cls, settings: Settings, paths: AppPaths) -> LibraryRoots:
        """The configured model folders, the download folder, the app's models folder, the HF cache, Ollama."""
        folders = [Path(f).expanduser() for f in settings.model_folders if f]
        if settings.download_dir:
            folders.append(Path(settings.download_dir).expanduser())
        folders.append(paths.models_dir)
        unique = list(dict.fromkeys(os.path.abspath(f) for f in folders))
        configured = [f for f in settings.model_folders if f]
        optional = frozenset(Path(os.path.abspath(f)) for f in folders[len(configured) :])
        return cls(tuple(Path(f) for f in unique), hf_hub_cache_dir(), ollama_models_dir(), optional)

    def all(self) -> list[Path]:
        return [*self.folders, *(p for p in (self.hf_cache, self.ollama) if p is not None)]


@dataclass
class LibraryScan:
    entries: list[LibraryEntry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # folders that could not be read
    headers_read: int = 0  # files whose header was read in this scan (0 for an unchanged library)
    cache_hits: int = 0


class ModelLibrary:
    """Indexes the roots; ``cache_file`` None keeps the header cache in memory only."""

    def __init__(self, roots: LibraryRoots, cache_file: Path | None = None) -> None:
        self.roots = roots
        self.cache = HeaderCache(cache_file)

    @classmethod
    def for_app(cls, settings: Settings, paths: AppPaths) -> ModelLibrary:
        return cls(LibraryRoots.from_settings(settings, paths), paths.cache_dir / "library-index.json")

    def scan(self, progress: Progress | None = None) -> LibraryScan:
        """Index every root (blocking). Never raises for what it finds on disk."""
        self.cache.begin()
        scan = LibraryScan()
        report = WalkReport()
        seen: set[str] = set()
        add = _Adder(scan, self.cache, seen, progress)
        for folder in self.roots.folders:
            if folder.is_dir():
                self._scan_folder(folder, report, add)
            elif folder not in self.roots.optional:
                report.problems.append(f"The model folder {folder} does not exist. Fix or remove it in Settings.")
        if self.roots.hf_cache is not None:
            self._scan_hf_cache(self.roots.hf_cache, report, add)
        if self.roots.ollama is not None:
            self._scan_ollama(self.roots.ollama, report, add)
        models_per_folder = Counter(os.path.dirname(e.path) for e in scan.entries if e.kind is KIND_GGUF)
        scan.entries = [_paired(entry, add.projectors, models_per_folder) for entry in scan.entries]
        self.cache.save()
        scan.problems = report.problems
        scan.cache_hits = self.cache.hits
        return scan

    def _scan_folder(self, root: Path, report: WalkReport, add: _Adder) -> None:
        for folder, entries in walk_folders(root, report):
            names = {e.name for e in entries}
            if is_model_folder_listing(names):
                add.hf_folder(folder, root, SOURCE_FOLDER, None)
            for entry in entries:
                if entry.name.lower().endswith(".gguf") and not entry.name.startswith("."):
                    add.gguf(Path(entry.path), root, SOURCE_FOLDER, name=None, repo_id=None)

    def _scan_hf_cache(self, root: Path, report: WalkReport, add: _Adder) -> None:
        for repo in scan_hf_cache(root, report):
            for file in repo.gguf_files:
                add.gguf(file.path, root, SOURCE_HF_CACHE, name=None, repo_id=repo.repo_id)
            if repo.model_folder is not None:
                add.hf_folder(repo.model_folder, root, SOURCE_HF_CACHE, repo.repo_id)

    def _scan_ollama(self, root: Path, report: WalkReport, add: _Adder) -> None:
        for model in scan_ollama_store(root, report):
            if model.error or model.blob_path is None:
                add.broken(str(model.manifest_path), model.name, root, SOURCE_OLLAMA, model.error or "")
            else:
                add.gguf(model.blob_path, root, SOURCE_OLLAMA, name=model.name, repo_id=None)

    # --- delete -------------------------------------------------------------------------------------------------
    def delete(self, path: str | Path) -> list[Path]:
        """Delete a model inside the library's folders; returns what was removed. Raises LibraryError otherwise.

        An HF cache snapshot link takes its blob with it; the first shard of a split GGUF takes every shard
        (the library lists a split model by its first shard only). Ollama's files are refused: ``ollama rm``
        owns them.
        """
        target, root = self._locate(Path(path))
        if self.roots.ollama is not None and target.is_relative_to(_real(self.roots.ollama)):
            raise LibraryError(
                "This model belongs to Ollama: remove it through Ollama (`ollama rm NAME`), so Ollama's manifests and "
                "shared blobs stay consistent."
            )
        in_hf_cache = self.roots.hf_cache is not None and root == _real(self.roots.hf_cache)
        removed: list[Path] = []
        for part in _with_other_shards(target):
            removed += _remove(part, root if in_hf_cache else None)
        return removed

    def _locate(self, path: Path) -> tuple[Path, Path]:
        """The path with its folder resolved (the last component kept, so a link stays a link) and its root."""
        absolute = Path(os.path.abspath(path.expanduser()))
        if not os.path.lexists(absolute):
            raise LibraryError(f"{absolute} no longer exists. Rescan the library.", kind=ErrorKind.NOT_FOUND)
        located = _real(absolute.parent) / absolute.name
        for root in (_real(r) for r in self.roots.all()):
            if located != root and located.is_relative_to(root):
                return located, root
        raise LibraryError(
            f"{absolute} is not inside the library's folders, so it was not deleted. "
            "Delete it with your file manager if you really mean to."
        )


class _Adder:
    """Turns found files into entries: a header read only for new or changed files, each path once."""

    def __init__(self, scan: LibraryScan, cache: HeaderCache, seen: set[str], progress: Progress | None) -> None:
        self.scan, self.cache, self.seen, self.progress = scan, cache, seen, progress
        self.projectors: list[ProjectorFacts] = []  # projector GGUFs: paired with models, not listed as models

    def _first_time(self, key: str) -> bool:
        if key in self.seen:
            return False
        self.seen.add(key)
        if self.progress is not None:
            self.progress(len(self.seen), key)
        return True

    def gguf(self, path: Path, root: Path, source: EntrySource, *, name: str | None, repo_id: str | None) -> None:
        split = parse_split(path.name)
        if split is not None and split.index > 1:
            return  # a later shard of a split GGUF: the first shard stands for the model
        key = str(_real(path))  # an HF snapshot link and a folder link to the same blob count once
        if not self._first_time(key):
            return
        info, file_stamp = self._summary(path, key, gguf_summary)
        if info is None or file_stamp is None:
            return  # vanished during the scan: dropped
        if isinstance(facts := info.get("projector"), dict):
            self.projectors.append(ProjectorFacts(**{**facts, "path": str(path)}))
            return
        # Ollama's entries keep Ollama's name; a file that cannot be read shows its file name (which file to fix)
        display = name or (path.name if info.get("error") else model_display_name(info.get("general_name"), path))
        size_bytes = file_stamp.size_bytes
        if split is not None:
            info, size_bytes = _with_shards(path, info, size_bytes)
        self._append(path, display, KIND_GGUF, source, root, info, size_bytes, repo_id)

    def hf_folder(self, folder: Path, root: Path, source: EntrySource, repo_id: str | None) -> None:
        key = str(_real(folder))
        if not self._first_time(key):
            return
        file_stamp = model_folder_stamp(folder)
        if file_stamp is None:
            return
        info = self.cache.get(key, file_stamp)
        if info is None:
            info = model_folder_summary(folder)
            self.scan.headers_read += 1
            self.cache.put(key, file_stamp, info)
        self._append(folder, repo_id or folder.name, KIND_HF, source, root, info, file_stamp.size_bytes, repo_id)

    def broken(self, path: str, name: str, root: Path, source: EntrySource, error: str) -> None:
        if self._first_time(path):
            self.scan.entries.append(LibraryEntry(path, name, KIND_GGUF, source, error=error, root=str(root)))

    def _summary(
        self, path: Path, key: str, read: Callable[[Path], dict[str, Any]]
    ) -> tuple[dict[str, Any] | None, FileStamp | None]:
        """The cached summary, or a fresh read; a file that changes while read is read again once."""
        before = stamp(path)
        if before is None:
            return None, None
        cached = self.cache.get(key, before)
        if cached is not None:
            return cached, before
        for _attempt in range(2):
            info = read(path)
            self.scan.headers_read += 1
            after = stamp(path)
            if after is None:
                return None, None
            if after == before:
                self.cache.put(key, after, info)
                return info, after
            before = after  # it changed while we read it (still downloading?): read it again
        return info, before  # still changing: show what we read, cache nothing

    def _append(
        self,
        path: Path,
        name: str,
        kind: EntryKind,
        source: EntrySource,
        root: Path,
        info: dict[str, Any],
        size_bytes: int,
        repo_id: str | None,
    ) -> None:
        self.scan.entries.append(
            LibraryEntry(
                path=str(path),
                name=str(name),
                kind=kind,
                source=source,
                architecture=info.get("architecture"),
                parameter_count=info.get("parameter_count"),
                quantization=info.get("quantization"),
                size_bytes=size_bytes,
                context_length=info.get("context_length"),
                error=info.get("error"),
                repo_id=repo_id,
                root=str(root),
                family=info.get("family"),
                license=info.get("license"),
                vision=bool(info.get("vision")),
                embedding_length=info.get("embedding_length"),
            )
        )


def _paired(entry: LibraryEntry, projectors: list[ProjectorFacts], models_per_folder: Counter[str]) -> LibraryEntry:
    """A GGUF entry with its projector found next to it (see ``app.core.gguf.projector``)."""
    if entry.kind is not KIND_GGUF or entry.error or entry.source is SOURCE_OLLAMA:
        return entry
    folders = {str(f) for f in search_folders(Path(entry.path))}
    near = [p for p in projectors if os.path.dirname(p.path) in folders]
    seen_as_vision = looks_like_vision_model(entry.architecture, entry.name, entry.path)
    alone = models_per_folder[os.path.dirname(entry.path)] == 1
    pairing = choose(entry.path, entry.embedding_length, near, seen_as_vision, alone, entry.repo_id)
    return replace(
        entry, vision=pairing.vision, projector=pairing.projector, projector_problem=pairing.problem,
        projector_bytes=pairing.size_bytes,
    )  # fmt: skip


def _with_shards(first: Path, info: dict[str, Any], size_bytes: int) -> tuple[dict[str, Any], int]:
    """A split GGUF (``-00001-of-00003.gguf``): the size of all shards, an error when some are missing."""
    shards = split_files(first)
    if shards is None:
        return info, size_bytes
    info = dict(info)
    if not info.get("error") and shards.missing:
        missing = ", ".join(Path(p).name for p in shards.missing)
        info["error"] = f"{len(shards.missing)} of {shards.count} parts are missing ({missing}). Download them too."
    if not info.get("parameters_declared"):
        info["parameter_count"] = None  # the first shard's tensors are only part of the model
    return info, shards.total_bytes


def _with_other_shards(target: Path) -> list[Path]:
    """``target``, and when it is the first shard of a split GGUF, the other shards that are there."""
    shards = split_files(target) if not target.is_dir() else None
    if shards is None or shards.index != 1:
        return [target]
    others = [Path(p) for p in shards.paths[1:] if os.path.lexists(p)]  # a dangling HF link goes too
    return [target, *others]


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return Path(os.path.abspath(path))


def _remove(target: Path, hf_cache: Path | None) -> list[Path]:
    """Remove a file, link or folder; inside the HF cache, the blobs its links point to go too."""
    blobs = _hf_blobs(target, hf_cache) if hf_cache is not None else set()
    removed: list[Path] = []
    try:
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()
        removed.append(target)
        if hf_cache is not None and blobs:
            removed += _unlink_other_snapshot_links(target, hf_cache, blobs)
        for blob in sorted(blobs):
            blob.unlink(missing_ok=True)
            removed.append(blob)
    except OSError as exc:
        raise LibraryError(
            f"Could not delete {target}: {exc.strerror or exc}. Check its permissions.", kind=ErrorKind.UNAVAILABLE
        ) from exc
    log.info("Deleted from the library: %s", ", ".join(str(p) for p in removed))
    return removed


def _hf_blobs(target: Path, hf_cache: Path) -> set[Path]:
    """The cache blobs behind a snapshot link (or behind every link in a snapshot folder)."""
    if target.is_symlink():
        links = [target]
    elif target.is_dir():
        links = [p for p in target.rglob("*") if p.is_symlink()]
    else:
        links = []
    return {blob for blob in map(_real, links) if blob.is_relative_to(hf_cache) and blob.is_file()}


def _unlink_other_snapshot_links(target: Path, hf_cache: Path, blobs: set[Path]) -> list[Path]:
    """Links in the repository's other snapshots to the same blobs go too (they would dangle)."""
    repo_dir = hf_cache / target.relative_to(hf_cache).parts[0]
    removed = []
    for link in (repo_dir / "snapshots").rglob("*"):
        if link.is_symlink() and _real(link) in blobs:
            link.unlink()
            removed.append(link)
    return removed
