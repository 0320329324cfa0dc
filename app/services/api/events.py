"""What ``workstation.api`` tells its listeners, and its snapshot: frozen data only (no server, no sockets), so a
page, the status bar and the batch runner import it for nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from app.services.api.records import RequestRecord


class ApiState(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    SERVING = "serving"
    STOPPING = "stopping"
    FAILED = "failed"  # the last start failed: ``error`` says why


@dataclass(frozen=True)
class ApiSnapshot:
    """The server now. ``url`` and ``api_key`` (the key it asks for) while it serves; ``restart_to_apply``: the
    settings changed since it started, and apply on the next start; ``requests``: answered since it started;
    ``records``: the recent requests, oldest first (kept across restarts)."""

    state: ApiState = ApiState.STOPPED
    url: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never in a log line
    error: str | None = None
    restart_to_apply: bool = False
    requests: int = 0
    records: tuple[RequestRecord, ...] = ()

    @property
    def serving(self) -> bool:
        return self.state is ApiState.SERVING


@dataclass(frozen=True)
class ApiStateChanged:
    """The server started, stopped, failed to start, or its settings changed while it serves."""

    snapshot: ApiSnapshot


@dataclass(frozen=True)
class ApiRequestLogged:
    """A request arrived or changed (waiting, loading, generating, done, failed); ``requests``: answered since the
    server started."""

    record: RequestRecord
    requests: int


ApiEvent = ApiStateChanged | ApiRequestLogged
