"""Which models the server offers, under which ids, and the engine each runs in.

Ids: a GGUF in the library by its library name (the name every page shows: ``general.name``, else the file's
stem); two GGUFs with the same name each go by their file's stem instead (with a short hash of the path when even
those match). An Ollama model by ``name:tag``, a vLLM model by its served name. When engines share an id, each is
prefixed with its engine (``llamacpp/…``, ``ollama/…``, ``vllm/…``) and the bare name is ambiguous. Aliases also
resolve: a GGUF's file name and stem, ``ollama:NAME`` / ``vllm:NAME``, an Ollama ``name`` for ``name:latest``.

GGUFs come from libraries: the workstation's library service (its latest scan: a finished download or a folder
added in Settings shows at once, the owner calls ``invalidate``) and/or a ``ModelLibrary`` scanned off the loop.
Listings are cached for a few seconds; a name not found triggers one fresh look (a rescan) before the 404.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from app.services.api.errors import ApiError
from app.services.engines.entries import EngineKind, engine_model, entry_for
from app.services.engines.host import EngineHost
from app.services.library.index import EntryKind, LibraryEntry, LibraryScan, ModelLibrary
from app.services.library.names import file_stem, model_display_name

if TYPE_CHECKING:
    from app.services.ollama.shared import SharedOllama

log = logging.getLogger("app.services.api")

FRESH_S = 5.0
OLLAMA_LIST_TIMEOUT_S = 3.0
MAX_NAMES_IN_ERROR = 30

OllamaLister = Callable[[], Awaitable[list[str]]]


class LibraryFeed(Protocol):
    """The workstation's library service: its latest scan (None before the first), and a fresh one on demand."""

    def snapshot(self) -> LibraryScan | None: ...

    async def scan(self) -> LibraryScan: ...


LibrarySource = ModelLibrary | LibraryFeed


@dataclass(frozen=True)
class ServedModel:
    """``entry`` is the engine host's name for the model (a GGUF path, ``ollama:NAME``, ``vllm:NAME``)."""

    id: str
    engine: EngineKind
    entry: str
    created: int = 0
    aliases: tuple[str, ...] = ()

    def to_openai(self) -> dict[str, object]:
        return {"id": self.id, "object": "model", "created": self.created, "owned_by": str(self.engine)}


@dataclass(frozen=True)
class Candidate:
    engine: EngineKind
    entry: str
    name: str
    created: int = 0


def assign_ids(candidates: list[Candidate]) -> list[ServedModel]:
    """Unique, stable ids for ``candidates`` (see the module docstring)."""
    named = _unique_gguf_names(candidates)
    by_id: dict[str, list[Candidate]] = defaultdict(list)
    for candidate in named:
        by_id[candidate.name].append(candidate)
    models = []
    for name, group in by_id.items():
        clash = len({c.engine for c in group}) > 1
        for c in group:
            model_id = f"{c.engine}/{name}" if clash else name
            models.append(ServedModel(model_id, c.engine, c.entry, c.created, _aliases(c, model_id, clash)))
    return sorted(models, key=lambda m: (m.engine != EngineKind.LLAMACPP, m.id.lower()))


def _unique_gguf_names(candidates: list[Candidate]) -> list[Candidate]:
    groups: dict[str, list[Candidate]] = defaultdict(list)
    for c in candidates:
        if c.engine is EngineKind.LLAMACPP:
            groups[c.name].append(c)
    renamed: dict[str, str] = {}
    for group in groups.values():
        if len(group) < 2:
            continue
        stems = [file_stem(c.entry) for c in group]
        for c, stem in zip(group, stems, strict=True):
            short = hashlib.sha1(c.entry.encode()).hexdigest()[:6]
            renamed[c.entry] = stem if stems.count(stem) == 1 else f"{stem}@{short}"
    return [replace(c, name=renamed.get(c.entry, c.name)) if c.entry in renamed else c for c in candidates]


def _aliases(c: Candidate, model_id: str, clash: bool) -> tuple[str, ...]:
    names: list[str] = []
    if c.engine is EngineKind.LLAMACPP:
        names += [Path(c.entry).name, file_stem(c.entry), c.entry]
    else:
        own = engine_model(c.entry)
        names += [c.entry]
        if c.engine is EngineKind.OLLAMA and own.endswith(":latest"):
            names.append(own.removesuffix(":latest"))
    if not clash:
        names.append(c.name)
    return tuple(dict.fromkeys(n for n in names if n and n != model_id))


class ModelCatalog:
    """The models the server offers now. ``library`` (one source or several) None: no GGUFs but the one loaded;
    ``list_ollama`` None: no Ollama models."""

    def __init__(
        self,
        host: EngineHost,
        library: LibrarySource | Sequence[LibrarySource] | None = None,
        *,
        list_ollama: OllamaLister | None = None,
        fresh_s: float = FRESH_S,
    ) -> None:
        self._host = host
        self._libraries: list[LibrarySource] = (
            [] if library is None else list(library) if isinstance(library, Sequence) else [library]
        )
        self._list_ollama = list_ollama
        self._fresh_s = fresh_s
        self._models: list[ServedModel] = []
        self._taken_at = float("-inf")
        self._changes = 0  # invalidations so far: one during a listing makes that listing stale at once
        self._lock = asyncio.Lock()

    def add_library(self, library: LibrarySource) -> None:
        """Serve this library's GGUFs too (``serve --models-dir``)."""
        self._libraries.append(library)
        self.invalidate()

    def invalidate(self) -> None:
        """What it lists changed (a library scan, the Ollama host): the next listing looks again."""
        self._taken_at = float("-inf")
        self._changes += 1

    async def models(self, *, fresh: bool = False) -> list[ServedModel]:
        """Every model the server can serve now (cached for a few seconds unless ``fresh``: then the libraries
        are scanned again)."""
        async with self._lock:
            if fresh or time.monotonic() - self._taken_at > self._fresh_s:
                changes = self._changes
                self._models = assign_ids(await self._candidates(fresh))
                self._taken_at = time.monotonic() if changes == self._changes else float("-inf")
            return list(self._models)

    async def resolve(self, name: object) -> ServedModel:
        """The model a request names; ApiError 404 listing the models when there is none, 400 when ambiguous."""
        if not isinstance(name, str) or not name.strip():
            raise ApiError(400, "Name the model to use ('model'); GET /v1/models lists them.", param="model")
        async with self._lock:
            known = list(self._models)  # a name already known resolves without a rescan, however old the list
        found = _match(known, name) if known else None
        if found is None:
            found = _match(await self.models(fresh=True), name)
        if isinstance(found, ServedModel):
            return found
        if isinstance(found, list):
            choices = ", ".join(m.id for m in found)
            raise ApiError(400, f"'{name}' names several models: {choices}. Use one of those ids.", param="model",
                           code="model_ambiguous")  # fmt: skip
        ids = [m.id for m in self._models]
        listed = ", ".join(ids[:MAX_NAMES_IN_ERROR]) + (", …" if len(ids) > MAX_NAMES_IN_ERROR else "")
        raise ApiError(
            404, f"The model '{name}' does not exist here. Available: {listed or 'none'} (GET /v1/models lists them).",
            param="model", code="model_not_found",
        )  # fmt: skip

    async def _candidates(self, fresh: bool) -> list[Candidate]:
        found = await self._gguf_candidates(fresh)
        known = {c.entry for c in found}
        loaded = self._host.loaded(EngineKind.LLAMACPP)
        if loaded is not None and loaded.entry not in known:  # loaded from outside the library (the window)
            name = model_display_name(loaded.info.metadata.get("general.name"), loaded.entry)
            found.append(Candidate(EngineKind.LLAMACPP, loaded.entry, name, _mtime(loaded.entry)))
        found += [Candidate(EngineKind.OLLAMA, entry_for(EngineKind.OLLAMA, n), n) for n in await self._ollama()]
        vllm = set(self._host.vllm_entries())
        if (served := self._host.loaded(EngineKind.VLLM)) is not None:
            vllm.add(served.entry)
        found += [Candidate(EngineKind.VLLM, e, engine_model(e)) for e in sorted(vllm)]
        return found

    async def _gguf_candidates(self, fresh: bool) -> list[Candidate]:
        usable: dict[str, LibraryEntry] = {}
        for library in self._libraries:
            for entry in await _entries(library, fresh):
                if entry.kind is EntryKind.GGUF and entry.error is None:
                    usable.setdefault(entry.path, entry)  # a folder in two libraries: once
        if not usable:
            return []

        def candidates() -> list[Candidate]:  # a stat per file: off the loop
            return [Candidate(EngineKind.LLAMACPP, e.path, e.name, _mtime(e.path)) for e in usable.values()]

        return await asyncio.get_running_loop().run_in_executor(None, candidates)

    async def _ollama(self) -> list[str]:
        if self._list_ollama is None:
            return []
        try:
            return await asyncio.wait_for(self._list_ollama(), OLLAMA_LIST_TIMEOUT_S)
        except Exception as exc:  # not running, not reachable: no Ollama models, and say so once in a while
            log.debug("no Ollama models listed: %s", exc)
            return []


async def _entries(library: LibrarySource, fresh: bool) -> list[LibraryEntry]:
    if isinstance(library, ModelLibrary):
        return (await asyncio.get_running_loop().run_in_executor(None, library.scan)).entries
    scan = None if fresh else library.snapshot()
    return (scan if scan is not None else await library.scan()).entries


def ollama_lister(ollama: SharedOllama) -> OllamaLister:
    """List the names of Ollama's models through the shared client (the settings' host, else OLLAMA_HOST, else
    the default)."""

    async def names() -> list[str]:
        async with ollama.use() as service:
            return [m.name for m in await service.list_models()]

    return names


def _match(models: list[ServedModel], name: str) -> ServedModel | list[ServedModel] | None:
    for model in models:
        if model.id == name:
            return model
    by_alias = [m for m in models if name in m.aliases]
    if len(by_alias) == 1:
        return by_alias[0]
    bare = [m for m in models if m.id.split("/", 1)[-1] == name and "/" in m.id]
    if len(by_alias) > 1 or len(bare) > 1:
        return by_alias if len(by_alias) > 1 else bare
    folded = [m for m in models if m.id.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else None


def _mtime(path: str) -> int:
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return 0
