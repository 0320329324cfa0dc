"""Model ids that stay: once the server has given a model an id, the model keeps it — when a folder is added, when
another engine offers a model of the same name, after a restart (remembered under the server's ``state_dir``).

A model's natural id is its own name: a GGUF's library name (``general.name``, else the file's stem), an Ollama
model's ``name:tag``, a vLLM model's served name. A model keeps the id it was given before (a GGUF by its path, the
others by ``ollama:NAME`` / ``vllm:NAME``) while no other model present holds it. A model new to the server takes
its natural id when that is free; else it is told apart: a GGUF by its file's stem (and a short hash of its path
when the stem is taken too), a model whose name another engine's model holds by its engine's prefix
(``llamacpp/…``, ``ollama/…``, ``vllm/…``). The original keeps the name; only the newcomer is renamed.

Models new together take their ids in one fixed order, whatever order folders were scanned or engines answered:
models an engine itself names first (Ollama, then vLLM: those names are the user's own), then GGUFs, the older file
first (by modification time), then by path. So of two GGUFs with the same name seen at once, the older file keeps
the name.

Aliases resolve too: a GGUF's file name, stem and path; ``ENGINE/NAME`` for any model; ``ollama:NAME`` /
``vllm:NAME``; an Ollama ``name`` for ``name:latest``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from app.services.engines.entries import EngineKind, engine_model
from app.services.library.names import file_stem

log = logging.getLogger("app.services.api")

IDS_FILE = "model-ids.json"
IDS_FORMAT = 1
MAX_REMEMBERED = 10_000  # beyond it, the ids of models no longer present are forgotten, the oldest first
_ENGINE_ORDER = {EngineKind.OLLAMA: 0, EngineKind.VLLM: 1, EngineKind.LLAMACPP: 2}


@dataclass(frozen=True)
class ServedModel:
    """``entry`` is the engine host's name for the model (a GGUF path, ``ollama:NAME``, ``vllm:NAME``)."""

    id: str
    engine: EngineKind
    entry: str
    created: int = 0
    aliases: tuple[str, ...] = ()
    context_length: int | None = None  # the trained context (a GGUF's header), when known

    def to_openai(self, *, loaded: bool | None = None) -> dict[str, object]:
        """OpenAI's model object; with ``loaded``, LM Studio's ``state`` ("loaded" / "not-loaded") too, and its
        ``max_context_length`` when known (agents size their window by it)."""
        body: dict[str, object] = {"id": self.id, "object": "model", "created": self.created,
                                   "owned_by": str(self.engine)}  # fmt: skip
        if loaded is not None:
            body["state"] = "loaded" if loaded else "not-loaded"
        if self.context_length:
            body["max_context_length"] = self.context_length
        return body


@dataclass(frozen=True)
class Candidate:
    """A model the server could offer: ``name`` its natural id, ``created`` its file's modification time."""

    engine: EngineKind
    entry: str
    name: str
    created: int = 0
    context_length: int | None = None


def assign_ids(candidates: list[Candidate], remembered: dict[str, str] | None = None) -> list[ServedModel]:
    """Unique ids for ``candidates``: the ones in ``remembered`` (entry → id) where still free, the natural or a
    told-apart id for the rest (see the module docstring)."""
    remembered = remembered or {}
    ordered = sorted(candidates, key=lambda c: (_ENGINE_ORDER[c.engine], c.created, c.entry))
    holders: dict[str, EngineKind] = {}  # id → the engine of the model holding it
    given: dict[str, str] = {}  # entry → id
    for c in ordered:
        kept = remembered.get(c.entry)
        if kept and kept not in holders and c.entry not in given:
            holders[kept], given[c.entry] = c.engine, kept
    for c in ordered:
        if c.entry not in given:
            model_id = _first_free(_choices(c, holders), holders)
            holders[model_id], given[c.entry] = c.engine, model_id
    models = [ServedModel(given[c.entry], c.engine, c.entry, c.created, _aliases(c, given[c.entry]),
                          c.context_length)
              for c in ordered]  # fmt: skip
    return sorted(models, key=lambda m: (m.engine != EngineKind.LLAMACPP, m.id.lower()))


def _choices(c: Candidate, holders: dict[str, EngineKind]) -> list[str]:
    """The ids ``c`` may take, best first."""
    prefixed = f"{c.engine}/{c.name}"
    short = hashlib.sha1(c.entry.encode()).hexdigest()[:6]
    if c.engine is not EngineKind.LLAMACPP:
        return [c.name, prefixed, f"{prefixed}@{short}"]
    stem = file_stem(c.entry)
    if holders.get(c.name, EngineKind.LLAMACPP) is not EngineKind.LLAMACPP:  # another engine's model holds it
        return [prefixed, stem, f"{stem}@{short}"]
    return [c.name, stem, f"{stem}@{short}"]


def _first_free(choices: list[str], holders: dict[str, EngineKind]) -> str:
    for choice in choices:
        if choice not in holders:
            return choice
    base, count = choices[-1], 2
    while f"{base}-{count}" in holders:
        count += 1
    return f"{base}-{count}"


def _aliases(c: Candidate, model_id: str) -> tuple[str, ...]:
    names: list[str] = [f"{c.engine}/{c.name}", f"{c.engine}/{model_id}"]
    if c.engine is EngineKind.LLAMACPP:
        names += [Path(c.entry).name, file_stem(c.entry), c.entry]
    else:
        own = engine_model(c.entry)
        names.append(c.entry)
        if c.engine is EngineKind.OLLAMA and own.endswith(":latest"):
            names.append(own.removesuffix(":latest"))
    return tuple(dict.fromkeys(n for n in names if n and n != model_id))


class IdMemory:
    """The ids given so far (entry → id), for the catalog's life, and in ``folder``/model-ids.json when a folder
    is given (read once, written when an id is new; both off the loop). A file that cannot be read is ignored,
    with a log line; one that cannot be written is logged, and the ids stay in memory."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}
        self._folder: Path | None = None
        self._read = True

    def keep_in(self, folder: Path | None) -> None:
        if folder != self._folder:
            self._folder, self._read = folder, folder is None

    async def load(self) -> None:
        if self._read or self._folder is None:
            return
        self._read = True
        found = await asyncio.get_running_loop().run_in_executor(None, read_ids, self._folder / IDS_FILE)
        self.ids = {**found, **self.ids}  # what this server gave already stands

    async def remember(self, models: Iterable[ServedModel]) -> None:
        present = {m.entry: m.id for m in models}
        new = {entry: model_id for entry, model_id in present.items() if self.ids.get(entry) != model_id}
        if not new:
            return
        self.ids.update(new)
        for entry in [e for e in self.ids if e not in present][: max(0, len(self.ids) - MAX_REMEMBERED)]:
            del self.ids[entry]
        if self._folder is not None:
            path, ids = self._folder / IDS_FILE, dict(self.ids)
            await asyncio.get_running_loop().run_in_executor(None, write_ids, path, ids)


def read_ids(path: Path) -> dict[str, str]:
    """The ids kept in ``path``; {} when there is none or it cannot be read (logged)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring the remembered model ids in %s (it cannot be read: %s); ids start afresh", path, exc)
        return {}
    ids = data.get("ids") if isinstance(data, dict) and data.get("format") == IDS_FORMAT else None
    if not isinstance(ids, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in ids.items()):
        log.warning("ignoring the remembered model ids in %s (not a model-ids file); ids start afresh", path)
        return {}
    return ids


def write_ids(path: Path, ids: dict[str, str]) -> None:
    """Write ``ids`` to ``path`` whole (a temporary file renamed over it); a failure is logged, not raised."""
    text = json.dumps({"format": IDS_FORMAT, "ids": ids}, ensure_ascii=False, indent=1)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=".model-ids-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as exc:
        log.warning("could not remember the model ids in %s (%s); they last until the server stops", path, exc)
