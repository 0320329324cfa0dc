"""Which models the server offers, under which ids, and the engine each runs in.

Ids (``model_ids``): a model's own name (a GGUF's library name, an Ollama ``name:tag``, a vLLM served name), told
apart when another model holds it already; an id once given stays the model's for the catalog's life, and across
restarts when the server has a ``state_dir``. Aliases also resolve: a GGUF's file name and stem, ``ENGINE/NAME``,
``ollama:NAME`` / ``vllm:NAME``, an Ollama ``name`` for ``name:latest``.

GGUFs come from libraries: the workstation's library service (its latest scan: a finished download or a folder
added in Settings shows at once, the owner calls ``invalidate``) and/or a ``ModelLibrary`` scanned off the loop.
Listings are cached for a few seconds; a name not found triggers one fresh look (a rescan) before the 404.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from app.services.api.errors import ApiError
from app.services.api.model_ids import Candidate as Candidate
from app.services.api.model_ids import IdMemory
from app.services.api.model_ids import ServedModel as ServedModel
from app.services.api.model_ids import assign_ids as assign_ids
from app.services.engines.entries import EngineKind, engine_model, entry_for
from app.services.engines.host import EngineHost
from app.services.library.index import EntryKind, LibraryEntry, LibraryScan, ModelLibrary
from app.services.library.names import model_display_name

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
        self._ids = IdMemory()

    def keep_ids_in(self, folder: Path | None) -> None:
        """Remember the ids given in ``folder`` (the server's ``state_dir``) too, so that a restart keeps them;
        None: for this catalog's life only."""
        self._ids.keep_in(folder)

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
                await self._ids.load()
                self._models = assign_ids(await self._candidates(fresh), self._ids.ids)
                await self._ids.remember(self._models)
                self._taken_at = time.monotonic() if changes == self._changes else float("-inf")
            return list(self._models)

    def is_loaded(self, model: ServedModel) -> bool:
        """Whether ``model`` is in memory now: loaded in its engine (llama.cpp: its worker, its embedding slot or
        its parallel engine), or served by a server that loaded it itself (vLLM)."""
        if not self._host.facts(model.engine).loads_models:
            return True
        loaded = self._host.loaded(model.engine)
        if loaded is not None and loaded.entry == model.entry:
            return True
        if model.engine is not EngineKind.LLAMACPP:
            return False
        slot, parallel = self._host.embedding_slot, self._host.parallel.loaded
        in_slot = slot is not None and slot.holds(model.entry)
        return in_slot or (parallel is not None and parallel.entry == model.entry)

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
            return [
                Candidate(EngineKind.LLAMACPP, e.path, e.name, _mtime(e.path), e.context_length)
                for e in usable.values()
            ]

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
