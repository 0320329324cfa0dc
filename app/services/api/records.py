"""The request log: one record per API request, published each time it changes (waiting, loading, generating,
done or failed) to whoever subscribed — the Server page's live table, the metrics, the process log. Records hold
figures only: never a prompt, a reply or a key."""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

log = logging.getLogger("app.services.api")

MAX_RECENT = 500


class RequestState(StrEnum):
    WAITING = "waiting"  # in line for the engine (another reply, or a model switch, is ahead of it)
    LOADING = "loading"  # its model is being loaded for it
    GENERATING = "generating"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class RequestRecord:
    """One request's figures. ``wait_ms``: time in line (and loading) before the engine began on it;
    ``ttft_ms``: from arrival to the first token, as the client saw it; ``tokens_per_s``: decode speed;
    ``n_ctx``: the context the model ran it with; ``note``: what the server did to serve it (a reload with a larger
    context), in words."""

    id: int
    started_at: float  # wall clock (time.time())
    client: str
    endpoint: str  # "chat.completions", "completions", "embeddings", "messages", "count_tokens", "models", …
    stream: bool = False
    model: str = ""
    engine: str = ""
    state: RequestState = RequestState.WAITING
    status: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_ms: float | None = None
    tokens_per_s: float | None = None
    wait_ms: float | None = None
    load_ms: float | None = None
    duration_ms: float | None = None
    finish_reason: str | None = None
    error: str | None = None
    n_ctx: int | None = None
    note: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in (RequestState.DONE, RequestState.FAILED)


Listener = Callable[[RequestRecord], None]


class RequestLog:
    """The records of recent requests, newest last; listeners hear of each change on the server's loop."""

    def __init__(self, max_recent: int = MAX_RECENT) -> None:
        self._recent: OrderedDict[int, RequestRecord] = OrderedDict()  # by id, oldest first: O(1) updates
        self._max_recent = max_recent
        self._listeners: list[Listener] = []
        self._ids = itertools.count(1)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every record change from now on; returns the function that unsubscribes."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def recent(self) -> list[RequestRecord]:
        """The latest version of each recent request, oldest first."""
        return list(self._recent.values())

    def open(self, client: str, endpoint: str) -> Tracker:
        record = RequestRecord(next(self._ids), time.time(), client, endpoint)
        return Tracker(self, record)

    def publish(self, record: RequestRecord) -> None:
        known = record.id in self._recent
        self._recent[record.id] = record  # a known id keeps its place
        if not known and len(self._recent) > self._max_recent:
            self._recent.popitem(last=False)
        for listener in list(self._listeners):
            try:
                listener(record)
            except Exception:  # a broken view must not fail the request
                log.exception("a request-log listener failed")


class Tracker:
    """Updates one request's record; ``mark`` times from the request's arrival (monotonic)."""

    def __init__(self, log_: RequestLog, record: RequestRecord) -> None:
        self._log = log_
        self.record = record
        self.arrived = time.perf_counter()
        self.first_token_at: float | None = None

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.arrived) * 1000

    def update(self, **changes: object) -> None:
        if self.record.finished:
            return
        self.record = replace(self.record, **changes)  # type: ignore[arg-type]
        self._log.publish(self.record)

    def first_token(self) -> None:
        """The first token reached the server: from now on the request is generating."""
        if self.first_token_at is not None:
            return
        self.first_token_at = time.perf_counter()
        self.update(state=RequestState.GENERATING, ttft_ms=self.elapsed_ms())

    def finish(self, status: int, error: str | None = None, **figures: object) -> None:
        """The request ended (once: later calls change nothing)."""
        if self.record.finished:
            return
        state = RequestState.FAILED if error or status >= 400 else RequestState.DONE
        self.update(state=state, status=status, error=error, duration_ms=self.elapsed_ms(), **figures)
        record = self.record
        level = logging.INFO if status < 500 else logging.WARNING
        log.log(
            level,
            "%s %s model=%s engine=%s status=%s prompt=%s completion=%s ttft_ms=%s in %.0f ms%s",
            record.client, record.endpoint, record.model or "-", record.engine or "-", status,
            record.prompt_tokens, record.completion_tokens,
            f"{record.ttft_ms:.0f}" if record.ttft_ms is not None else "-", record.duration_ms or 0.0,
            (f" ({error})" if error else "") + (f" [{record.note}]" if record.note else ""),
        )  # fmt: skip
