"""Stored responses (``store: true``, the Responses API's default): each response object with its input items, so
``previous_response_id`` rebuilds the conversation (the chain of earlier responses' inputs and outputs) and
``GET``/``DELETE /v1/responses/{id}`` find it.

With a folder (the app's data folder), one owner-only JSON file per response under ``responses/``; the newest
``keep`` (1,000) are kept and none older than 30 days, as OpenAI keeps them. All file work runs on one thread of its
own, in order (a read after a delete sees it deleted), never on the event loop; a file that cannot be read or
parsed is logged and counts as not stored. The newest ones are also held in memory, so a follow-up does not wait on
the disk. Without a folder, the newest ``keep`` (200) are held in memory only."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from app.services.api.errors import ApiError, bad_request
from app.services.api.responses_items import canonical_item
from app.services.paths import PRIVATE_DIR, open_private

log = logging.getLogger("app.services.api")

T = TypeVar("T")
DISK_KEEP = 1000
MEMORY_KEEP = 200
CACHED = 64  # the newest ones also held in memory when they are on disk
MAX_AGE_S = 30 * 24 * 3600.0
FOLDER = "responses"
_ID = re.compile(r"resp_[A-Za-z0-9]{1,100}")


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]
    input: list[dict[str, Any]]

    @property
    def created_at(self) -> float:
        value = self.response.get("created_at")
        return float(value) if isinstance(value, int | float) else 0.0


@functools.cache
def _disk() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread every store's file work runs on, in the order it was asked."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="api-responses")


class ResponseStore:
    def __init__(self, state_dir: Path | None, *, keep: int | None = None, max_age_s: float = MAX_AGE_S,
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.folder = state_dir / FOLDER if state_dir is not None else None
        self.keep = keep or (DISK_KEEP if self.folder is not None else MEMORY_KEEP)
        self.max_age_s = max_age_s
        self._clock = clock
        self._memory: OrderedDict[str, StoredResponse] = OrderedDict()
        self._held = min(self.keep, CACHED) if self.folder is not None else self.keep
        self._pending: set[asyncio.Future[None]] = set()

    # --- writing ---------------------------------------------------------------------------------------------------
    def put(self, response: dict[str, Any], items: list[dict[str, Any]]) -> None:
        """Store ``response`` with its input ``items``: found at once; on disk soon after (off the loop)."""
        stored = StoredResponse(response, items)
        self._hold(response["id"], stored)
        if self.folder is not None:
            self._in_background(functools.partial(self._write, stored))

    async def delete(self, response_id: str) -> bool:
        """Forget a stored response; False when there was none."""
        held = self._memory.pop(response_id, None) is not None
        if self.folder is None or not _ID.fullmatch(response_id):
            return held
        removed = await self._on_disk(functools.partial(self._remove, response_id))
        return held or removed

    async def flush(self) -> None:
        """Wait for the writes asked so far (tests; a clean stop)."""
        if self._pending:
            await asyncio.gather(*self._pending)

    # --- reading ---------------------------------------------------------------------------------------------------
    async def get(self, response_id: str) -> StoredResponse | None:
        if not _ID.fullmatch(response_id):  # never a path: the id names a file
            return None
        stored = self._memory.get(response_id)
        if stored is None and self.folder is not None:
            stored = await self._on_disk(functools.partial(self._read, response_id))
        if stored is None or self._clock() - stored.created_at > self.max_age_s:
            return None
        return stored

    async def history(self, response_id: str) -> list[dict[str, Any]]:
        """The conversation up to and including ``response_id``: each earlier response's input items and output
        items, oldest first. A 400 (``previous_response_not_found``) when it, or one it continues, is not stored."""
        chain: list[StoredResponse] = []
        wanted: str | None = response_id
        while wanted is not None and len(chain) <= self.keep:
            stored = await self.get(wanted)
            if stored is None:
                raise _not_found(response_id, wanted)
            chain.append(stored)
            parent = stored.response.get("previous_response_id")
            wanted = parent if isinstance(parent, str) and parent else None
        return [item for stored in reversed(chain) for item in stored.input + stored.response.get("output", [])]

    # --- memory --------------------------------------------------------------------------------------------------
    def _hold(self, response_id: str, stored: StoredResponse) -> None:
        self._memory[response_id] = stored
        self._memory.move_to_end(response_id)
        while len(self._memory) > self._held:
            self._memory.popitem(last=False)

    # --- the disk (on its own thread) ----------------------------------------------------------------------------
    def _in_background(self, work: Callable[[], None]) -> None:
        future = asyncio.get_running_loop().run_in_executor(_disk(), work)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)

    async def _on_disk(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(_disk(), work)

    def _path(self, response_id: str) -> Path:
        assert self.folder is not None
        return self.folder / f"{response_id}.json"

    def _write(self, stored: StoredResponse) -> None:
        path = self._path(stored.response["id"])
        part = path.with_suffix(".part")
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
            with open_private(part) as out:
                json.dump({"version": 1, "response": stored.response, "input": stored.input}, out,
                          ensure_ascii=False, separators=(",", ":"))  # fmt: skip
            os.replace(part, path)
            self._prune()
        except (OSError, TypeError, ValueError) as exc:
            log.warning("could not store response %s in %s: %s", stored.response["id"], path.parent, exc)

    def _read(self, response_id: str) -> StoredResponse | None:
        path = self._path(response_id)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("stored response %s cannot be read (%s): taken as not stored", path, exc)
            return None
        if not (isinstance(data, dict) and isinstance(data.get("response"), dict)
                and isinstance(data.get("input"), list) and data["response"].get("id") == response_id):  # fmt: skip
            log.warning("stored response %s is not one this server wrote: taken as not stored", path)
            return None
        try:  # what a follow-up rebuilds from must read as items
            for i, item in enumerate(data["input"] + list(data["response"].get("output") or [])):
                canonical_item(item, f"item {i}")
        except ApiError as exc:
            log.warning("stored response %s has a broken item (%s): taken as not stored", path, exc)
            return None
        return StoredResponse(data["response"], data["input"])

    def _remove(self, response_id: str) -> bool:
        try:
            self._path(response_id).unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("could not delete stored response %s: %s", response_id, exc)
            return False
        return True

    def _prune(self) -> None:
        """Drop the files past ``keep`` (the oldest first) and those older than ``max_age_s``."""
        assert self.folder is not None
        dated = []
        for path in self.folder.glob("resp_*.json"):
            try:
                dated.append((path.stat().st_mtime, path))
            except OSError:
                continue
        dated.sort(reverse=True)
        cutoff = self._clock() - self.max_age_s
        for rank, (mtime, path) in enumerate(dated):
            if rank >= self.keep or mtime < cutoff:
                try:
                    path.unlink()
                except OSError as exc:
                    log.info("could not drop stored response %s: %s", path, exc)


def _not_found(asked: str, missing: str) -> ApiError:
    if missing == asked:
        message = f"Previous response with id '{asked}' not found."
    else:
        message = (f"Previous response with id '{asked}' continues '{missing}', which is no longer stored (deleted, or "
                   f"older than this server keeps).")  # fmt: skip
    hint = " Send the whole conversation as 'input' instead (store=false responses are never stored)."
    return bad_request(message + hint, param="previous_response_id", code="previous_response_not_found")


def not_found(response_id: str) -> ApiError:
    return ApiError(404, f"Response with id '{response_id}' not found. Responses sent with store=false are not kept; "
                         "stored ones are dropped after 30 days or when newer ones push them out.", param="response_id",
                    code="not_found")  # fmt: skip
