"""The one seam between the app and its engines: what the UI and services may rely on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol, runtime_checkable

from app.backends.facts import EngineFacts
from app.core.chat.conversation import ReplyStats
from app.core.errors import AppError, ErrorKind, InvalidInputError
from app.core.params import GenerationOptions, LoadParams, SamplingParams


class BackendError(AppError):
    """A failure a person should read: the message says what happened and what to do next."""

    kind = ErrorKind.ENGINE_FAILED


class ModelLoadError(BackendError):
    pass


class BackendBusyError(BackendError):
    kind = ErrorKind.BUSY


class GenerationError(BackendError):
    """Generation failed part-way; ``partial`` holds what was produced before the failure."""

    def __init__(self, message: str, partial: str = "") -> None:
        super().__init__(message)
        self.partial = partial


class RequestRefusedError(GenerationError, InvalidInputError):
    """The engine refused the request as asked (a schema it cannot enforce, a tool choice it cannot force, a
    chat sent to an embedding model): the caller changes the request. Nothing was generated."""

    kind = ErrorKind.INVALID_INPUT  # GenerationError's ENGINE_FAILED would come first in the MRO


class StateKind(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    GENERATING = "generating"
    FAILED = "failed"


@dataclass(frozen=True)
class BackendState:
    kind: StateKind
    detail: str = ""

    def label(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else str(self.kind)


@dataclass(frozen=True)
class KvUsage:
    used_cells: int
    total_cells: int
    per_sequence: dict[int, int] = field(default_factory=dict)

    @property
    def fraction(self) -> float:
        return self.used_cells / self.total_cells if self.total_cells else 0.0


@dataclass(frozen=True)
class ModelInfo:
    path: str
    name: str
    architecture: str | None
    n_ctx: int
    n_ctx_train: int | None
    n_gpu_layers: int
    chat_format: str | None
    chat_format_reason: str
    load_seconds: float
    gpu_offload_supported: bool
    metadata: dict[str, str] = field(default_factory=dict)
    vision: bool | None = None  # it reads images sent with a message (llama.cpp: its projector loaded); None: unknown
    projector: str | None = None  # llama.cpp: the projector (mmproj) file loaded with it
    projector_problem: str | None = None  # llama.cpp: what is missing or wrong with its projector, in words


@dataclass(frozen=True)
class Delta:
    """A piece of a streamed reply. ``logprobs``: one entry per token of this piece, in OpenAI's shape
    (``{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}``), when they were asked
    for. ``tool_calls``: tool-call pieces an engine parsed itself (vLLM, Ollama), in OpenAI's streaming shape
    (``{"index", "id"?, "type"?, "function": {"name"?, "arguments"}}``; ``arguments`` is JSON text, possibly in
    parts). llama.cpp leaves calls in ``text``: the reply parser finds them. ``reasoning``: thinking the engine
    separated from the answer itself (vLLM's ``reasoning_content``, Ollama's ``thinking``); llama.cpp leaves
    thinking tags in ``text``: the reply parser finds them too."""

    text: str
    logprobs: list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    reasoning: str = ""


StateListener = Callable[[BackendState], None]


class BackendBase:
    """What every backend shares: its state and the listeners told of changes, the loaded model, the last
    reply's figures and the KV usage it left."""

    kind = "base"
    facts: ClassVar[EngineFacts] = EngineFacts()

    def __init__(self) -> None:
        self._state = BackendState(StateKind.STOPPED)
        self._listeners: list[StateListener] = []
        self._model: ModelInfo | None = None
        self._stats: ReplyStats | None = None
        self._kv: KvUsage | None = None

    @property
    def state(self) -> BackendState:
        return self._state

    @property
    def model(self) -> ModelInfo | None:
        return self._model

    def add_state_listener(self, listener: StateListener) -> None:
        self._listeners.append(listener)

    def stats(self) -> ReplyStats | None:
        return self._stats

    def kv_usage(self) -> KvUsage | None:
        return self._kv

    def _set_state(self, kind: StateKind, detail: str = "") -> None:
        self._state = BackendState(kind, detail)
        for listener in list(self._listeners):
            listener(self._state)


@runtime_checkable
class ReplyHandle(Protocol):
    """A streamed reply, the one shape every engine's ``stream_chat`` returns: ``async for delta in reply``, its own
    ``stop()`` and figures (``stats``, once it has ended), ``aclose()`` to end it early."""

    @property
    def stats(self) -> ReplyStats | None: ...

    def stop(self) -> None: ...

    def __aiter__(self) -> AsyncIterator[Delta]: ...

    def __anext__(self) -> Awaitable[Delta]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Backend(Protocol):
    kind: str
    facts: ClassVar[EngineFacts]  # what the engine does itself (images, tools, continuing, thinking switches)

    @property
    def state(self) -> BackendState: ...

    @property
    def model(self) -> ModelInfo | None: ...

    def add_state_listener(self, listener: StateListener) -> None: ...

    async def load(self, model: str, params: LoadParams) -> ModelInfo: ...

    async def unload(self) -> None: ...

    def stream_chat(
        self, messages: list[dict[str, Any]], params: SamplingParams, options: GenerationOptions | None = None
    ) -> ReplyHandle:
        """The reply; its ``stop()``, cancelling the consuming task or closing it stops at the next token.
        ``options`` (structured output, tools, logprobs) are enforced or refused with RequestRefusedError /
        InvalidInputError, never ignored."""
        ...

    def stop(self) -> None:
        """Stop every reply in flight on this engine at its next token."""
        ...

    def stats(self) -> ReplyStats | None:
        """The figures of the last reply that ended (each reply has its own: ``ReplyHandle.stats``)."""
        ...

    def kv_usage(self) -> KvUsage | None: ...

    async def close(self) -> None: ...


# --- optional capabilities, checked with implements() ---------------------------------------------------------
@runtime_checkable
class ConcurrentChats(Protocol):
    """An engine on which several ``stream_chat`` calls may run at once."""

    @property
    def active_chats(self) -> int: ...


@runtime_checkable
class WorkerProcessBackend(Protocol):
    """An engine that runs in a child process of the app, with live token counts (the monitor reads them)."""

    @property
    def worker_pid(self) -> int | None: ...

    @property
    def generated_tokens_total(self) -> int: ...


@runtime_checkable
class TextCompletion(Protocol):
    """An engine that continues a raw prompt (no chat template): OpenAI's ``/v1/completions``."""

    def stream_completion(
        self, prompt: str, params: SamplingParams, options: GenerationOptions | None = None
    ) -> ReplyHandle: ...


@runtime_checkable
class Embeddings(Protocol):
    """An engine that turns texts into vectors (a model loaded for embeddings)."""

    async def embed(self, texts: list[str]) -> list[list[float]]: ...


@runtime_checkable
class TokenCounting(Protocol):
    """An engine that counts a chat's prompt tokens as it would render them (chat template, tools included)."""

    async def count_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int: ...


_IMPLEMENTS: dict[tuple[type, type], bool] = {}


def implements(obj: object, protocol: type) -> bool:
    """``isinstance(obj, protocol)`` for the runtime-checkable protocols above, decided once per class: a
    protocol check walks the protocol's members on every call (~50 µs), which an API request made several times.
    Valid because every member of these protocols is a method or property of the class, not an instance field."""
    key = (type(obj), protocol)
    found = _IMPLEMENTS.get(key)
    if found is None:
        found = _IMPLEMENTS[key] = isinstance(obj, protocol)
    return found
