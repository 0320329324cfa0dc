"""One store of per-model settings: load options, sampling, the preset applied last and the thinking choice,
for each model someone set them for. The chat, the Library and the API server's on-demand loads all read it.

JSON in the data folder, owner-only and written atomically, read with :mod:`app.core.safe_json`. A model is an
entry (a GGUF path, ``ollama:NAME``, ``vllm:NAME``). A GGUF that was moved or copied keeps its settings: when no
record has its path, a record with the same file name and the same size in bytes is the same model (its path is
updated on the next save). What is not set falls back to the global defaults, except for the starter model,
whose defaults are its shipped preset.

Thread-safe; the file is read on first use (blocking: call :meth:`ModelSettingsStore.load` off the Qt thread) and
each change is written at once (blocking too).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from app.core import safe_json
from app.core.chat.thinking import ThinkingChoice
from app.core.modelfile.parser import parse_modelfile
from app.core.modelfile.presets import to_llamacpp
from app.core.params import REASONING_EFFORTS, LoadParams, SamplingParams
from app.core.settings import Settings
from app.core.user_files import read_user_text
from app.services import starter_model
from app.services.engines.entries import engine_prefix

log = logging.getLogger(__name__)

FILE_NAME = "model-settings.json"
VERSION = 1
MAX_BYTES = 4 * 1024 * 1024  # a record is well under 1 KiB


@dataclass(frozen=True)
class ModelSettings:
    """What one model uses instead of the global defaults; ``None`` means "the default"."""

    load: LoadParams | None = None
    sampling: SamplingParams | None = None
    preset: str | None = None  # the Modelfile applied last, by name
    thinking: bool | None = None  # thinking on/off, for models whose template offers it (None: the model's default)
    effort: str | None = None  # reasoning effort ("low", "medium", "high"), where the template offers it

    @property
    def empty(self) -> bool:
        return self == ModelSettings()

    def to_dict(self) -> dict[str, Any]:
        return {
            "load": self.load.to_dict() if self.load else None,
            "sampling": self.sampling.to_dict() if self.sampling else None,
            "preset": self.preset,
            "thinking": self.thinking,
            "effort": self.effort,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSettings:
        """Raises TypeError/ValueError for values of the wrong type."""
        load, sampling = data.get("load"), data.get("sampling")
        preset, thinking, effort = data.get("preset"), data.get("thinking"), data.get("effort")
        if not isinstance(load, dict | None) or not isinstance(sampling, dict | None):
            raise TypeError("load and sampling must be objects")
        if not isinstance(preset, str | None) or not isinstance(thinking, bool | None):
            raise TypeError("preset must be text and thinking true or false")
        if effort is not None and effort not in REASONING_EFFORTS:
            raise ValueError(f"effort must be one of {', '.join(REASONING_EFFORTS)}")
        return cls(
            LoadParams.from_dict(_checked(LoadParams, load)) if load is not None else None,
            SamplingParams.from_dict(_checked(SamplingParams, sampling)) if sampling is not None else None,
            preset,
            thinking,
            effort,
        )

    @property
    def thinking_choice(self) -> ThinkingChoice:
        return ThinkingChoice(self.thinking, self.effort)


def _checked(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` if each known field has the type of its default (a whole number where a float goes, None where
    the field may be unset, a list of text for ``stop``); TypeError naming the field otherwise."""
    for item in fields(cls):
        if item.name not in data:
            continue
        value, default = data[item.name], item.default
        if value is None and "None" in str(item.type):
            continue
        if item.name == "stop":
            good = isinstance(value, list) and all(isinstance(s, str) for s in value)
        elif isinstance(default, bool):
            good = isinstance(value, bool)
        elif default is None:
            good = isinstance(value, int if "int" in str(item.type) else str) and not isinstance(value, bool)
        else:
            good = isinstance(value, type(default) | (int if isinstance(default, float) else type(default)))
            good = good and not isinstance(value, bool)
        if not good:
            raise TypeError(f"{item.name} has a value of the wrong type ({value!r})")
    return data


@dataclass
class _Record:
    entry: str
    name: str
    size: int | None  # bytes, for a GGUF file
    settings: ModelSettings


class ModelSettingsStore:
    """``get(entry)``, ``set(entry, settings)``, ``effective_load(entry)``, ``effective_sampling(entry)``.

    ``defaults`` returns the global settings (what is not set per model). A file that cannot be read is left as
    it is: ``problem`` says why, defaults are used and changes are kept for this session only.
    """

    def __init__(self, path: Path, defaults: Callable[[], Settings] = Settings) -> None:
        self.path = Path(path)
        self._defaults = defaults
        self._lock = threading.RLock()
        self._records: list[_Record] | None = None
        self._sizes: dict[str, int | None] = {}
        self.problem: str | None = None

    # --- reading ------------------------------------------------------------------------------------------------
    def load(self) -> None:
        """Read the file now (once); later calls do nothing."""
        with self._lock:
            if self._records is None:
                self._records = self._read()

    def get(self, entry: str) -> ModelSettings:
        """The model's own settings; for a model without any, its built-in ones (the starter's preset) or none."""
        saved = self.saved(entry)
        if saved is not None:
            return saved
        return builtin_settings(entry, self._defaults()) or ModelSettings()

    def saved(self, entry: str) -> ModelSettings | None:
        """What was saved for the model, None when nothing was."""
        with self._lock:
            record = self._find(entry)
            return record.settings if record else None

    def effective_load(self, entry: str) -> LoadParams:
        return self.get(entry).load or self._defaults().load

    def effective_sampling(self, entry: str) -> SamplingParams:
        return self.get(entry).sampling or self._defaults().sampling

    # --- writing ------------------------------------------------------------------------------------------------
    def set(self, entry: str, settings: ModelSettings) -> None:
        """Keep ``settings`` for the model (an empty one forgets it) and write the file."""
        with self._lock:
            record = self._find(entry)
            records = self._all()
            if record is not None:
                records.remove(record)
            if not settings.empty:
                records.append(_Record(entry, _file_name(entry), self._size(entry), settings))
            self._write()

    def update(self, entry: str, **changes: Any) -> ModelSettings:
        """``set`` the model's current settings with ``changes`` (ModelSettings fields); returns the result."""
        with self._lock:
            settings = replace(self.get(entry), **changes)
            self.set(entry, settings)
            return settings

    def forget(self, entry: str) -> None:
        """Back to the defaults for this model."""
        self.set(entry, ModelSettings())

    # --- internals ----------------------------------------------------------------------------------------------
    def _all(self) -> list[_Record]:
        self.load()
        assert self._records is not None
        return self._records

    def _find(self, entry: str) -> _Record | None:
        records = self._all()
        exact = next((r for r in records if r.entry == entry), None)
        if exact is not None or engine_prefix(entry):
            return exact
        size = self._size(entry)
        if size is None:
            return None
        name = _file_name(entry)
        return next((r for r in records if r.size == size and r.name == name), None)  # the same file, moved

    def _size(self, entry: str) -> int | None:
        if engine_prefix(entry):
            return None
        if entry not in self._sizes:
            try:
                self._sizes[entry] = os.stat(entry).st_size
            except OSError:
                return None  # not there (now): maybe later
        return self._sizes[entry]

    def _read(self) -> list[_Record]:
        try:
            data = safe_json.load_file(self.path, what=FILE_NAME, max_bytes=MAX_BYTES)
            return _records_from(data)
        except FileNotFoundError:
            return []
        except (OSError, ValueError, TypeError, KeyError) as exc:  # ValueError: JsonError, UserFileError
            self.problem = (
                f"The per-model settings could not be read ({_short(exc)}). Defaults are used and changes are "
                f"kept until the app closes; fix or remove {FILE_NAME} in the data folder."
            )
            log.error("%s (%s)", self.problem, self.path)
            return []

    def _write(self) -> None:
        if self.problem is not None:
            log.warning("Not saving per-model settings over a file that could not be read: %s", self.path)
            return
        records = self._all()
        data = {
            "version": VERSION,
            "models": [
                {"entry": r.entry, "name": r.name, "size": r.size, "settings": r.settings.to_dict()} for r in records
            ],
        }
        _write_private(self.path, json.dumps(data, indent=1))


def _records_from(data: object) -> list[_Record]:
    if not isinstance(data, dict) or not isinstance(data.get("models", []), list):
        raise TypeError("it does not hold a list of models")
    version = data.get("version", VERSION)
    if not isinstance(version, int) or version > VERSION:
        raise ValueError(f"it was written by a newer version of the app (version {version})")
    records = []
    for item in data.get("models", []):
        if not isinstance(item, dict) or not isinstance(item.get("entry"), str):
            raise TypeError("a model without an entry")
        size = item.get("size")
        if not isinstance(size, int | None) or not isinstance(item.get("settings"), dict):
            raise TypeError(f"the record of {item['entry']!r} has a value of the wrong type")
        name = str(item.get("name") or _file_name(item["entry"]))
        records.append(_Record(item["entry"], name, size, ModelSettings.from_dict(item["settings"])))
    return records


def _write_private(path: Path, text: str) -> None:
    """Owner-only and atomic: a crash leaves the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _file_name(entry: str) -> str:
    return entry if engine_prefix(entry) else Path(entry).name


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 120 else text[:119] + "…"


# --- built-in settings --------------------------------------------------------------------------------------------


def builtin_settings(entry: str, defaults: Settings) -> ModelSettings | None:
    """The settings a model has before anyone sets any: the starter model's shipped preset, over the defaults."""
    if not starter_model.is_starter(entry):
        return None
    text = _starter_preset_text()
    if text is None:
        return None
    preset = to_llamacpp(parse_modelfile(text), defaults.load, defaults.sampling)
    return ModelSettings(load=preset.load, sampling=preset.sampling, preset=starter_model.PRESET_NAME)


@functools.cache
def _starter_preset_text() -> str | None:
    try:
        return read_user_text(starter_model.preset_path(), max_bytes=64 * 1024, what="the starter preset")
    except (OSError, ValueError) as exc:  # missing from a broken install: the starter runs with the defaults
        log.warning("%s", exc)
        return None
