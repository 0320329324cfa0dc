"""What the engine host tells its clients. Every event is a small immutable fact, delivered on the host's loop."""

from __future__ import annotations

from dataclasses import dataclass

from app.backends.protocol import BackendState, KvUsage, ModelInfo
from app.core.chat.conversation import ReplyStats
from app.core.params import LoadParams
from app.services.engines.entries import EngineKind


@dataclass(frozen=True)
class EngineStateChanged:
    engine: EngineKind
    state: BackendState


@dataclass(frozen=True)
class ModelLoaded:
    engine: EngineKind
    entry: str
    info: ModelInfo
    params: LoadParams


@dataclass(frozen=True)
class ModelUnloaded:
    engine: EngineKind
    entry: str


@dataclass(frozen=True)
class EmbeddingModelLoaded:
    """A model loaded in the embedding slot: a second llama.cpp worker that holds an embedding model beside the
    engine's own model (``ModelLoaded`` is always that one's)."""

    engine: EngineKind
    entry: str
    info: ModelInfo
    params: LoadParams


@dataclass(frozen=True)
class EmbeddingModelUnloaded:
    engine: EngineKind
    entry: str


@dataclass(frozen=True)
class LoadWaiting:
    """A load waits for the replies ahead of it on a single-sequence engine."""

    engine: EngineKind
    entry: str
    replies_ahead: int


@dataclass(frozen=True)
class QueueChanged:
    """Replies waiting for a single-sequence engine (the one generating not counted)."""

    engine: EngineKind
    waiting: int


@dataclass(frozen=True)
class ReplyFigures:
    """A reply ended: its figures and the KV usage it left."""

    engine: EngineKind
    stats: ReplyStats | None
    kv: KvUsage | None


@dataclass(frozen=True)
class VllmEndpoint:
    """A vLLM server the app can use: the one it started (``managed``) or someone else's (``remote``)."""

    base_url: str
    served_model: str
    api_key: str | None
    source: str  # "managed" | "remote"
    pid: int | None = None  # the managed server's process, for the monitor


@dataclass(frozen=True)
class VllmEndpointChanged:
    endpoint: VllmEndpoint | None  # None: no vLLM server to use any more


@dataclass(frozen=True)
class SlotView:
    """One slot (KV stream) of the parallel llama.cpp engine: ``cells`` of its ``n_ctx`` in use (its request's, or
    the prefix kept from its last one), ``state`` idle / prefilling / decoding, and whose request runs there."""

    slot: int
    state: str
    cells: int
    n_ctx: int
    client: str | None = None  # who asked (the API's client address), None when idle
    request: str | None = None  # the request's label (the API's request-log id), None when idle
    generated: int = 0  # tokens its request has generated so far


@dataclass(frozen=True)
class ParallelSnapshot:
    """The parallel llama.cpp engine now: its model (None: not started), slots, and requests waiting for one."""

    entry: str | None = None
    slots: tuple[SlotView, ...] = ()
    waiting: int = 0
    pid: int | None = None
    generated_total: int | None = None  # tokens generated since the engine started (only grows; None: not started)

    @property
    def cells_used(self) -> int:
        return sum(s.cells for s in self.slots)

    @property
    def cells_total(self) -> int:
        return sum(s.n_ctx for s in self.slots)


@dataclass(frozen=True)
class ParallelSlotsChanged:
    """The parallel llama.cpp engine's slots or queue changed: at once when a request is queued, starts or ends,
    and about twice a second while it generates."""

    engine: EngineKind
    snapshot: ParallelSnapshot


EngineEvent = (
    EngineStateChanged
    | ModelLoaded
    | ModelUnloaded
    | LoadWaiting
    | QueueChanged
    | ReplyFigures
    | VllmEndpointChanged
    | EmbeddingModelLoaded
    | EmbeddingModelUnloaded
    | ParallelSlotsChanged
)
