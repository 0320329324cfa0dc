"""Saved bench runs: one JSON file per run under ``<data dir>/bench``, listed newest first, compared by ratio.

A run is ``{"id", "saved_at", "target", "workload", "machine", "rows"}``; ``id`` is the file's stem.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core import safe_json
from app.core.bench.stats import BenchRow, compare_rows
from app.core.errors import AppError, ErrorKind
from app.services.paths import open_private

log = logging.getLogger("app.services.bench")


class BenchStoreError(AppError):
    """A saved run cannot be read or written; the message names the file and what to do. Kind: not found (no
    such run), invalid input (a bad id or a damaged file) or unavailable (the folder cannot be written)."""

    kind = ErrorKind.INVALID_INPUT


@dataclass(frozen=True)
class SavedRun:
    """One line of the saved-runs list."""

    id: str
    saved_at: str
    backend: str
    model: str
    concurrencies: tuple[int, ...]
    best_tokens_per_s: float | None

    def label(self) -> str:
        best = f"{self.best_tokens_per_s:,.1f} tok/s" if self.best_tokens_per_s is not None else "no result"
        levels = ",".join(str(c) for c in self.concurrencies)
        return f"{self.saved_at}  {self.backend}  {self.model}  c={levels}  best {best}"


def _slug(text: str) -> str:
    name = Path(text).name.removesuffix(".gguf") or text
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:60] or "model"


class BenchStore:
    """The saved runs in ``folder`` (created on first save)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def save(self, run: dict[str, Any]) -> str:
        """Write ``run`` (atomically) and return its id."""
        self.folder.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = run.get("target", {})
        base = f"{stamp}-{target.get('backend', 'bench')}-{_slug(str(target.get('model', '')))}"
        run_id, n = base, 1
        while (self.folder / f"{run_id}.json").exists():
            n += 1
            run_id = f"{base}-{n}"
        record = {**run, "id": run_id, "saved_at": time.strftime("%Y-%m-%d %H:%M:%S")}
        path = self.folder / f"{run_id}.json"
        temporary = path.with_suffix(".tmp")
        try:
            with open_private(temporary) as out:  # owner-only
                out.write(json.dumps(record, indent=2))
            os.replace(temporary, path)
        except OSError as exc:
            raise BenchStoreError(
                f"cannot save the bench run in {self.folder}: {exc.strerror or exc}", kind=ErrorKind.UNAVAILABLE
            ) from None
        return run_id

    def load(self, run_id: str) -> dict[str, Any]:
        run_id = run_id.removesuffix(".json")
        if not run_id or Path(run_id).name != run_id:
            raise BenchStoreError(f"{run_id!r} is not a saved run's id", setting="run_id")
        path = self.folder / f"{run_id}.json"
        try:
            data = safe_json.load_file(path, what="it")
        except FileNotFoundError:
            raise BenchStoreError(
                f"no saved bench run {run_id!r}", kind=ErrorKind.NOT_FOUND, setting="run_id"
            ) from None
        except (OSError, ValueError) as exc:  # ValueError: JsonError (malformed, nested, too large)
            raise BenchStoreError(f"the saved run {path} cannot be read ({exc}); delete or fix the file") from None
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise BenchStoreError(f"the saved run {path} has no rows; delete or fix the file")
        return data

    def runs(self) -> list[SavedRun]:
        """Every readable saved run, newest first (unreadable files are left out, with a logged warning)."""
        runs = []
        for path in sorted(self.folder.glob("*.json"), reverse=True):
            try:
                runs.append(_summary(self.load(path.stem), path.stem))
            except (BenchStoreError, TypeError, ValueError, KeyError, AttributeError) as exc:
                log.warning("Leaving the saved bench run %s out of the list: %s", path, exc)
        return runs

    def compare(self, before_id: str, after_id: str) -> list[dict[str, Any]]:
        """Ratios after/before for each configuration in both runs (see ``compare_rows``)."""
        before, after = self.load(before_id), self.load(after_id)
        return compare_rows(rows_of(before), rows_of(after))


def rows_of(run: dict[str, Any]) -> list[BenchRow]:
    return [BenchRow.from_dict(r) for r in run.get("rows", []) if isinstance(r, dict)]


def _summary(run: dict[str, Any], file_id: str) -> SavedRun:
    rows = rows_of(run)
    target = run.get("target")
    if not isinstance(target, dict):
        target = {}
    rates = [r.output_tokens_per_s for r in rows if not r.skipped and r.output_tokens]
    return SavedRun(
        id=file_id,  # what ``load`` takes, whatever the file's own "id" says
        saved_at=str(run.get("saved_at", "")),
        backend=str(target.get("backend", "?")),
        model=Path(str(target.get("model", "?"))).name,
        concurrencies=tuple(r.concurrency for r in rows),
        best_tokens_per_s=max(rates) if rates else None,
    )
