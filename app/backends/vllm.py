"""The vLLM backend: the Backend protocol over vLLM's OpenAI-compatible server, remote or started by the app.

vLLM batches: several replies generate at once on one server, which is the reason to use it. So
``stream_chat`` may be called again while replies are in flight; each call returns a ``ChatStream`` with its
own ``stop()`` and ``stats``, and ``stats()`` is the last reply that ended. Stopping a reply closes its HTTP
request, which makes vLLM abort it. ``metrics()`` reads ``/metrics`` (KV-cache usage, queue, throughput);
``kv_usage()`` is the KV cache as of the last reading. The streaming itself is ``app.backends.openai_stream``.

The server is either one someone else started or the one the app started; the engine host
(``app.services.engines``) owns the app's own server, this backend only talks to whichever is offered.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from app.backends import raw_http
from app.backends.facts import VLLM_FACTS
from app.backends.http_json import response_json
from app.backends.openai_stream import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    ChatStream,
    ClientLanes,
    HttpError,
    StreamError,
    StreamTruncated,
    completion_body,
    error_message,
    json_or_none,
    request_body,
    run_reply,
)
from app.backends.protocol import (
    BackendBase,
    BackendBusyError,
    BackendError,
    GenerationError,
    KvUsage,
    ModelInfo,
    ModelLoadError,
    RequestRefusedError,
    StateKind,
)
from app.backends.raw_http import KeptAlivePoster
from app.backends.server_url import normalize_server_url
from app.core.chat.conversation import ReplyStats
from app.core.chat.prompt_errors import vllm_context_hint
from app.core.errors import InvalidInputError
from app.core.lazy_import import lazy_import
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from app.core.vllm.metrics import MetricsParseError, VllmMetrics, figures_from_page

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_import("httpx")  # ~100 ms: loaded when first used


log = logging.getLogger("app.backends.vllm")

DEFAULT_URL = "http://127.0.0.1:8000"
CHECK_TIMEOUT_S = 10.0
KEPT = " The partial reply was kept."


# --- a capability the monitor can check with isinstance ---------------------------------------------------
@runtime_checkable
class EngineMetrics(Protocol):
    """A backend whose engine reports live figures (KV cache, queue, throughput)."""

    async def metrics(self) -> VllmMetrics: ...


# --- helpers -----------------------------------------------------------------------------------------------
def normalize_url(url: str | None) -> str:
    """A vLLM server's base URL (``DEFAULT_URL`` when none is given): see ``normalize_server_url``."""
    return normalize_server_url(url, default=DEFAULT_URL)


# --- the backend -------------------------------------------------------------------------------------------
class VllmBackend(BackendBase):
    """Chat through a vLLM server (``kind = "vllm"``); several replies may generate at once."""

    kind = "vllm"
    facts = VLLM_FACTS

    def __init__(self, base_url: str | None = None, api_key: str | None = None) -> None:
        """A vLLM server at ``base_url`` (default http://127.0.0.1:8000): one the app started or someone else's
        (the engine host owns the app's own server)."""
        super().__init__()
        self.base_url = normalize_url(base_url)
        self._api_key = api_key or None
        self._clients = ClientLanes(self.base_url, self._api_key)
        self._poster = KeptAlivePoster(self.base_url, self._api_key) if raw_http.usable_for(self.base_url) else None
        self._served = ""
        self._metrics: VllmMetrics | None = None
        self._streams: set[ChatStream] = set()

    # --- public API -----------------------------------------------------------------------------------------
    @property
    def active_chats(self) -> int:
        return len(self._streams)

    @property
    def generating(self) -> bool:
        return bool(self._streams)

    def kv_usage(self) -> KvUsage | None:
        """The KV cache in tokens (usage fraction × blocks × block size) as of the last ``metrics()``."""
        metrics = self._metrics
        capacity = metrics.kv_capacity_tokens if metrics else None
        if metrics is None or capacity is None or metrics.kv_cache_usage_fraction is None:
            return None
        return KvUsage(round(metrics.kv_cache_usage_fraction * capacity), capacity)

    async def load(self, model: str, params: LoadParams) -> ModelInfo:
        """Check that the server serves ``model`` (its only model when ``model`` is "").

        Raises ModelLoadError saying what is wrong (server down, key refused, model not served …).
        """
        if self.generating:
            raise BackendBusyError("Replies are being generated. Stop them before loading another model.")
        model = model.strip()
        self._set_state(StateKind.STARTING, f"loading {model or 'the served model'}")
        self._model = None
        started = time.perf_counter()
        try:
            entry = await self._served_entry(model)
        except BackendError as exc:
            self._set_state(StateKind.FAILED, str(exc))
            raise ModelLoadError(str(exc)) from exc
        self._served = str(entry["id"])
        with contextlib.suppress(BackendError):
            await self.metrics()
        self._model = self._model_info(entry, params, time.perf_counter() - started)
        self._set_state(StateKind.READY, self._served)
        log.info("vLLM serves %s at %s (max_model_len %d)", self._served, self.base_url, self._model.n_ctx)
        return self._model

    async def unload(self) -> None:
        """Forget the model (the server keeps serving it; stopping the server frees its memory)."""
        if self.generating:
            raise BackendBusyError("Replies are being generated. Stop them before unloading the model.")
        self._model, self._metrics = None, None
        self._set_state(StateKind.STOPPED)

    def stream_chat(
        self, messages: list[dict[str, Any]], params: SamplingParams, options: GenerationOptions | None = None
    ) -> ChatStream:
        """Start streaming a reply; other replies may be in flight. Cancelling the consumer stops it too.

        ``options`` travel as OpenAI's fields: vLLM enforces ``response_format`` itself and, when started with
        tool parsing on, returns ``tool_calls``; a request it refuses raises RequestRefusedError (HTTP 400)."""
        self._check_options(options)
        return self._open(request_body(self._served, messages, params, options), CHAT_PATH, options)

    def stream_completion(
        self, prompt: str, params: SamplingParams, options: GenerationOptions | None = None
    ) -> ChatStream:
        """Continue ``prompt`` as raw text through ``/v1/completions``."""
        self._check_options(options)
        if options is not None and options.tools:
            raise InvalidInputError("A text completion cannot call tools; send the tools with a chat instead.")
        return self._open(completion_body(self._served, prompt, params, options), COMPLETIONS_PATH, options)

    def _check_options(self, options: GenerationOptions | None) -> None:
        if self._model is None:
            raise BackendError("No model is loaded. Choose a vLLM model and load it first.")
        if options is None:
            return
        options.check()
        if options.grammar is not None:
            raise InvalidInputError("A raw grammar works on llama.cpp only; ask vLLM for a JSON schema instead.")

    def _open(self, body: dict[str, Any], path: str, options: GenerationOptions | None) -> ChatStream:
        whole = options is not None and options.whole
        return ChatStream(lambda stream: run_reply(
            stream, body, client=self._clients.next, path=path, whole=whole, begin=self._begin, end=self._end,
            failure=self._generation_error, poster=self._poster,
        ))  # fmt: skip

    def stop(self) -> None:
        """Stop every reply in flight."""
        for stream in list(self._streams):
            stream.stop()

    async def metrics(self) -> VllmMetrics:
        """Read ``/metrics`` now (it needs no API key, even with ``--api-key``); kept for ``kv_usage()``."""
        if not self.base_url:
            raise BackendError("No vLLM server is running yet: load a model first.")
        try:
            response = await self._clients.first.get("/metrics", timeout=CHECK_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise BackendError(self._transport_failure(exc, "reading its metrics")) from None
        if response.status_code != 200:
            raise BackendError(f"vLLM at {self.base_url} has no readable /metrics (HTTP {response.status_code}).")
        try:
            self._metrics = figures_from_page(response.text, self.base_url)
        except MetricsParseError as exc:
            raise BackendError(str(exc)) from None
        return self._metrics

    async def close(self) -> None:
        """Stop every reply and close the connections."""
        self.stop()
        await self._clients.aclose()
        if self._poster is not None:
            await self._poster.aclose()
        self._model, self._metrics = None, None
        self._set_state(StateKind.STOPPED)

    # --- loading --------------------------------------------------------------------------------------------
    async def _served_entry(self, model: str) -> dict[str, Any]:
        """Check ``/health``, then find ``model`` in ``/v1/models`` (the only served one when ``model`` is "")."""
        health = await self._get("/health", "checking its health")
        if health.status_code != 200:
            raise BackendError(
                f"vLLM at {self.base_url} is not ready (/health answered {health.status_code}): it is still "
                "loading the model or its engine has stopped. Wait a moment and load again, or read its log."
            )
        response = await self._get("/v1/models", "listing its models")
        self._check_status(response, "/v1/models")
        try:
            body = response_json(response, what="its /v1/models answer")
            entries = [e for e in body["data"] if isinstance(e, dict) and "id" in e]
        except (ValueError, KeyError, TypeError):  # ValueError: JsonError (not JSON, nested, too large)
            raise BackendError(f"The server at {self.base_url} is not a vLLM (OpenAI-compatible) server.") from None
        names = [str(e["id"]) for e in entries]
        if not model and len(entries) == 1:
            return entries[0]
        for entry in entries:
            if entry["id"] == model:
                return entry
        served = ", ".join(names) or "nothing"
        wanted = f"does not serve '{model}'" if model else "serves several models"
        raise BackendError(f"vLLM at {self.base_url} {wanted}. It serves: {served}. Choose one of those.")

    async def _get(self, path: str, doing: str) -> httpx.Response:
        try:
            return await self._clients.first.get(path, timeout=CHECK_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise BackendError(self._transport_failure(exc, doing)) from None

    def _check_status(self, response: httpx.Response, path: str) -> None:
        if response.status_code == 401:
            raise BackendError(self._key_refused())
        if response.status_code != 200:
            reason = error_message(json_or_none(response)) or response.text[:200]
            raise BackendError(f"vLLM at {self.base_url} answered {path} with HTTP {response.status_code}: {reason}")

    def _model_info(self, entry: dict[str, Any], params: LoadParams, seconds: float) -> ModelInfo:
        n_ctx = int(entry.get("max_model_len") or params.n_ctx)
        metadata = {"backend": "vllm", "base_url": self.base_url}
        if entry.get("root"):
            metadata["root"] = str(entry["root"])
        if self._metrics is not None and self._metrics.kv_capacity_tokens:
            metadata["kv_cache_tokens"] = str(self._metrics.kv_capacity_tokens)
        if n_ctx != params.n_ctx:
            metadata["n_ctx_requested"] = str(params.n_ctx)
        return ModelInfo(
            path=str(entry.get("root") or entry["id"]), name=str(entry["id"]), architecture=None, n_ctx=n_ctx,
            n_ctx_train=None, n_gpu_layers=-1, chat_format=None,
            chat_format_reason="vLLM formats the prompt with the model's own chat template",
            load_seconds=seconds, gpu_offload_supported=True, metadata=metadata,
        )  # fmt: skip

    # --- streaming ------------------------------------------------------------------------------------------
    def _begin(self, stream: ChatStream) -> None:
        self._streams.add(stream)
        if len(self._streams) == 1:
            self._set_state(StateKind.GENERATING, self._served)

    def _end(self, stream: ChatStream, stats: ReplyStats) -> None:
        self._stats = stats
        self._streams.discard(stream)
        if self._streams:
            return
        if self._model is not None:
            self._set_state(StateKind.READY, self._model.name)
        elif self._state.kind is StateKind.GENERATING:
            self._set_state(StateKind.STOPPED)

    # --- errors ---------------------------------------------------------------------------------------------
    def _not_answering(self) -> str:
        return (
            f"vLLM is not answering at {self.base_url}. Start it (`vllm serve MODEL --host 127.0.0.1 --port PORT`) "
            "or check the address."
        )

    def _key_refused(self) -> str:
        if self._api_key:
            return f"vLLM at {self.base_url} refused the API key (HTTP 401): enter the key it was started with."
        return f"vLLM at {self.base_url} needs an API key (HTTP 401): enter the key the server was started with."

    def _transport_failure(self, exc: BaseException, doing: str) -> str:
        if isinstance(exc, httpx.ConnectError):
            return self._not_answering()
        if isinstance(exc, httpx.TimeoutException):
            return f"vLLM at {self.base_url} did not answer in time while {doing}. It may be busy; try again."
        return f"The connection to vLLM at {self.base_url} was lost while {doing}. Check that it is still running."

    def _generation_error(self, exc: BaseException, partial: str) -> GenerationError:
        kept = KEPT if partial else ""
        if isinstance(exc, HttpError):
            if exc.status == 401:
                return GenerationError(self._key_refused(), partial)
            if exc.status in (400, 422):  # the request as asked (a schema, tool choice, context length)
                refused = vllm_context_hint(f"vLLM refused the request (HTTP {exc.status}): {exc}")
                return RequestRefusedError(refused, partial)
            return GenerationError(f"vLLM refused the request (HTTP {exc.status}): {exc}", partial)
        if isinstance(exc, httpx.ConnectError):
            self._model = None
            self._set_state(StateKind.FAILED, self._not_answering())
            return GenerationError(self._not_answering() + " Load the model again to continue.", partial)
        if isinstance(exc, httpx.HTTPError | StreamTruncated):
            return GenerationError(self._transport_failure(exc, "generating a reply") + kept, partial)
        if isinstance(exc, StreamError):
            return GenerationError(f"vLLM stopped the reply with an error: {exc}.{kept}", partial)
        if isinstance(exc, ValueError):  # JsonError: a chunk not JSON, nested too deeply or too large
            return GenerationError(f"vLLM at {self.base_url} sent a reply this app cannot read ({exc}).{kept}", partial)
        log.error("Unexpected failure streaming from vLLM: %r", exc)
        return GenerationError(f"Generating through vLLM failed: {exc}.{kept}", partial)
