"""The Ollama backend: the Backend protocol over a running Ollama server, through the official client.

Ollama owns the model: ``load`` checks that the model exists and warms it (an empty chat loads it with
``num_ctx``), ``stream_chat`` streams ``/api/chat``, and ``stop`` closes the HTTP connection, which is how
Ollama is told to stop generating. The load options (``num_ctx``, ``num_gpu`` …) go with every chat
request too: Ollama reloads a model whose options differ from the running one's, so a chat without
``num_ctx`` would silently reload it with the server's default context. The chat stream is read with httpx
(:func:`closing_lines`) rather than the official client, whose stream is left half-read on an error line.

This module also holds the host handling shared with ``app.services.ollama.client``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import time
import urllib.parse
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.backends.facts import OLLAMA_FACTS
from app.backends.http_lines import closing_lines
from app.backends.image_parts import for_ollama
from app.backends.ollama_fields import chat_fields, logprob_entries, ollama_messages, tool_call_pieces
from app.backends.protocol import (
    BackendBase,
    BackendBusyError,
    BackendError,
    Delta,
    GenerationError,
    KvUsage,
    ModelInfo,
    ModelLoadError,
    RequestRefusedError,
    StateKind,
)
from app.backends.streamed_reply import StreamedReply
from app.core import safe_json
from app.core.chat.conversation import ReplyStats
from app.core.errors import InvalidInputError
from app.core.lazy_import import lazy_import
from app.core.params import GenerationOptions, LoadParams, SamplingParams

if TYPE_CHECKING:
    import httpx
    import ollama
    import pydantic
else:
    ollama = lazy_import("ollama")  # ~150 ms with pydantic: loaded when first used
    pydantic = lazy_import("pydantic")
    httpx = lazy_import("httpx")


log = logging.getLogger("app.backends.ollama")

DEFAULT_HOST = "http://127.0.0.1:11434"
DEFAULT_PORT = 11434


# Generation may pause for minutes (a model loading); only connecting is bounded.
def stream_timeout() -> httpx.Timeout:
    return httpx.Timeout(None, connect=5.0)


BUSY_MESSAGE = "A reply is being generated. Stop it before loading another model."


# --- hosts --------------------------------------------------------------------------------------------------
def resolve_host(configured: str | None = None) -> str:
    """The Ollama URL to use: the configured host, else ``OLLAMA_HOST``, else ``http://127.0.0.1:11434``.

    Normalized as the official client does (``host`` → ``http://host:11434``, ``:port`` → loopback, a
    scheme without a port gets 80/443). A bind-all address (``0.0.0.0``, ``::``; common in ``OLLAMA_HOST``
    because the server reads it too) is mapped to loopback. User info in the URL is dropped, as the official
    client drops it. Raises ValueError for something that is not a host.
    """
    raw = (configured or "").strip() or os.environ.get("OLLAMA_HOST", "").strip()
    scheme, sep, hostport = raw.partition("://")
    port = DEFAULT_PORT
    if not sep:
        scheme, hostport = "http", raw
    elif scheme == "http":
        port = 80
    elif scheme == "https":
        port = 443
    else:
        raise InvalidInputError(
            f"The Ollama host '{_redact(raw)}' must start with http:// or https://.", setting="host"
        )
    try:
        split = urllib.parse.urlsplit(f"{scheme}://{hostport}")
        hostname = split.hostname or "127.0.0.1"
        port = split.port or port
    except ValueError as exc:
        raise InvalidInputError(
            f"The Ollama host '{_redact(raw)}' is not a valid address ({exc}).", setting="host"
        ) from None
    if hostname == "0.0.0.0":
        hostname = "127.0.0.1"
    elif hostname == "::":
        hostname = "::1"
    with contextlib.suppress(ValueError):
        if isinstance(ipaddress.ip_address(hostname), ipaddress.IPv6Address):
            hostname = f"[{hostname}]"
    path = split.path.strip("/")
    return f"{scheme}://{hostname}:{port}" + (f"/{path}" if path else "")


def _redact(raw: str) -> str:
    """The host as it may be shown or logged: any ``user:password@`` part removed."""
    scheme, sep, rest = raw.partition("://")
    if not sep:
        scheme, rest = "", raw
    authority, slash, tail = rest.partition("/")
    authority = authority.rsplit("@", 1)[-1]
    return f"{scheme}{sep}{authority}{slash}{tail}"


def client_options(timeout: httpx.Timeout | float | None = None) -> dict[str, Any]:
    """httpx settings for every Ollama connection: only the host itself is contacted.

    No redirects (a redirect could lead to another host), no proxy or netrc from the environment (a proxy
    would see the traffic; ``HTTP_PROXY`` would otherwise apply even to 127.0.0.1).
    """
    return {"timeout": stream_timeout() if timeout is None else timeout, "follow_redirects": False, "trust_env": False}


def auth_headers() -> dict[str, str]:
    """The header the official client adds from ``OLLAMA_API_KEY`` (never logged)."""
    key = os.environ.get("OLLAMA_API_KEY")
    return {"authorization": f"Bearer {key}"} if key else {}


def not_running_message(host: str) -> str:
    return f"Ollama is not running at {host}: start it with `ollama serve`."


def connection_failure(exc: BaseException, host: str, doing: str) -> str | None:
    """A readable sentence for a transport failure (refused, lost, timed out), or None for other errors.

    The official client turns a refused connection into the builtin ``ConnectionError`` for plain calls,
    but lets ``httpx.ConnectError`` through for streams, so both are handled.
    """
    if isinstance(exc, httpx.ConnectError | ConnectionError):
        return not_running_message(host)
    if isinstance(exc, httpx.TimeoutException):
        return f"Ollama at {host} did not answer in time while {doing}. It may be busy; try again."
    if isinstance(exc, httpx.TransportError):  # RemoteProtocolError, ReadError …: the connection was lost
        return (
            f"The connection to Ollama at {host} was lost while {doing}. "
            "Check that Ollama is still running (`ollama serve`) and try again."
        )
    if isinstance(exc, safe_json.JsonError | RecursionError | pydantic.ValidationError | httpx.DecodingError):
        why = _why_unreadable(exc)
        return f"The server at {host} sent a reply this app cannot read while {doing}{why}. Is it an Ollama server?"
    return None


def _why_unreadable(exc: BaseException) -> str:
    if isinstance(exc, safe_json.JsonError):
        return f" ({exc})"
    if isinstance(exc, RecursionError):  # the official client parses with json.loads: deep nesting raises this
        return " (its JSON is nested too deeply)"
    return ""


# --- options ------------------------------------------------------------------------------------------------
def sampling_options(params: SamplingParams) -> dict[str, Any]:
    """Ollama ``options`` for a chat request, as a plain dict (``ollama.Options`` silently drops ``min_p``)."""
    options: dict[str, Any] = {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "min_p": params.min_p,
        "repeat_penalty": params.repeat_penalty,
    }
    if params.max_tokens is not None:
        options["num_predict"] = params.max_tokens
    if params.seed is not None:
        options["seed"] = params.seed
    if params.stop:
        options["stop"] = list(params.stop)
    if params.presence_penalty:
        options["presence_penalty"] = params.presence_penalty
    if params.frequency_penalty:
        options["frequency_penalty"] = params.frequency_penalty
    return options


def load_options(params: LoadParams) -> dict[str, Any]:
    """The options that decide how Ollama loads the model; sent with the warm-up and with every chat.

    ``n_gpu_layers=None`` leaves the split to Ollama, ``-1`` asks for every layer (``num_gpu`` 999).
    flash attention and the KV cache type are server settings (OLLAMA_FLASH_ATTENTION, OLLAMA_KV_CACHE_TYPE).
    """
    options: dict[str, Any] = {"num_ctx": params.n_ctx, "num_batch": params.n_batch}
    if params.n_gpu_layers is not None:
        options["num_gpu"] = 999 if params.n_gpu_layers < 0 else params.n_gpu_layers
    if params.n_threads:
        options["num_thread"] = params.n_threads
    if not params.use_mmap:
        options["use_mmap"] = False
    return options


# --- the backend --------------------------------------------------------------------------------------------
@dataclass
class _Reply:
    sent_at: float
    parts: list[str] = field(default_factory=list)
    first_at: float | None = None
    last_at: float | None = None
    final: ollama.ChatResponse | None = None
    calls: int = 0  # tool calls so far


class OllamaBackend(BackendBase):
    """Chat through a running Ollama server (``kind = "ollama"``)."""

    kind = "ollama"
    facts = OLLAMA_FACTS

    def __init__(self, host: str | None = None, *, keep_alive: float | str | None = None) -> None:
        super().__init__()
        try:
            self.host = resolve_host(host)
        except ValueError as exc:
            raise BackendError(str(exc)) from None
        self._keep_alive = keep_alive
        self._client = ollama.AsyncClient(host=self.host, **client_options())
        # The chat stream is read raw (see closing_lines), with the headers the official client sends.
        self._http = httpx.AsyncClient(base_url=self.host, headers=auth_headers(), **client_options())
        self._options: dict[str, Any] = {}
        self._pump: asyncio.Task[None] | None = None
        self._stopping = False

    # --- public API -----------------------------------------------------------------------------------------
    @property
    def generating(self) -> bool:
        return self._pump is not None

    async def load(self, model: str, params: LoadParams) -> ModelInfo:
        """Check that Ollama has ``model``, load it with ``params.n_ctx`` and describe it.

        Raises ModelLoadError with a readable reason (Ollama not running, no such model, not enough memory …).
        """
        if self.generating:
            raise BackendBusyError(BUSY_MESSAGE)
        model = model.strip()
        if not model:
            raise ModelLoadError("Choose an Ollama model to load.")
        if params.n_ctx < 16:
            raise ModelLoadError("Context size must be at least 16 tokens.")
        previous = self._model.name if self._model else None
        self._set_state(StateKind.STARTING, f"loading {model}")
        self._model, self._kv = None, None
        options = load_options(params)
        started = time.perf_counter()
        try:
            show = await self._client.show(model)
            if previous and previous != model:
                await self._unload_quietly(previous)
            await self._client.chat(model=model, messages=[], options=options, keep_alive=self._keep_alive)
            running = await self._running_entry(model)
        except Exception as exc:
            message = self._load_failure(exc, model)
            self._set_state(StateKind.FAILED, message)
            raise ModelLoadError(message) from exc
        self._options = options
        self._model = _model_info(model, show, running, params, time.perf_counter() - started, self.host)
        self._kv = KvUsage(0, self._model.n_ctx)
        self._set_state(StateKind.READY, self._model.name)
        log.info("Ollama loaded %s in %.2f s (num_ctx %d)", model, self._model.load_seconds, self._model.n_ctx)
        return self._model

    async def unload(self) -> None:
        """Ask Ollama to unload the model now (``keep_alive: 0``) instead of after its idle timeout."""
        if self.generating:
            raise BackendBusyError("A reply is being generated. Stop it before unloading the model.")
        if self._model is not None:
            await self._unload_quietly(self._model.name)
        self._model, self._kv = None, None
        self._set_state(StateKind.STOPPED)

    def stream_chat(
        self, messages: list[dict[str, Any]], params: SamplingParams, options: GenerationOptions | None = None
    ) -> StreamedReply:
        """Stream a reply. Its ``stop()`` ends it (finish reason "stopped"); cancelling the consumer stops it too.

        ``options``: Ollama enforces ``format`` (JSON or a schema) and parses tool calls itself (they come as
        ``Delta.tool_calls``); a forced tool choice or a raw grammar is refused (InvalidInputError)."""
        return StreamedReply(lambda handle: self._chat(handle, messages, params, options))

    async def _chat(
        self, handle: StreamedReply, messages: list[dict[str, Any]], params: SamplingParams,
        options: GenerationOptions | None,
    ) -> AsyncGenerator[Delta, None]:  # fmt: skip
        fields = chat_fields(options)
        if self.generating:
            raise BackendBusyError("A reply is already being generated. Stop it first.")
        if self._model is None:
            raise BackendError("No model is loaded. Choose an Ollama model and load it first.")
        name = self._model.name
        model_options = {**self._options, **sampling_options(params)}
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        reply = _Reply(sent_at=time.perf_counter())
        self._stopping = False
        body = {"model": name, "messages": ollama_messages(for_ollama(messages)), "options": model_options, **fields}
        self._pump = asyncio.create_task(self._pump_chat(body, queue))
        self._set_state(StateKind.GENERATING, name)
        handle.on_stop(self.stop)  # one reply at a time: this one
        finish: str | None = None
        try:
            while True:
                kind, value = await queue.get()
                if self._stopping or kind == "stopped":
                    finish = "stopped"
                    return
                if kind == "end":
                    finish = (reply.final.done_reason if reply.final else None) or "stop"
                    return
                if kind == "error":
                    finish = "error"
                    raise self._generation_error(value, "".join(reply.parts))
                chunk: ollama.ChatResponse = value
                text, thinking = chunk.message.content or "", chunk.message.thinking or ""
                calls = tool_call_pieces(chunk.message.tool_calls, reply.calls)
                reply.calls += len(calls)
                if chunk.done:
                    reply.final = chunk
                if text or calls or thinking:
                    now = time.perf_counter()
                    reply.first_at = reply.first_at or now
                    reply.last_at = now
                    reply.parts.append(text)
                    yield Delta(text, logprobs=logprob_entries(chunk.logprobs), tool_calls=calls or None,
                                reasoning=thinking)  # fmt: skip
        finally:
            pump, self._pump = self._pump, None
            if pump is not None and not pump.done():
                pump.cancel()
            if pump is not None:
                await asyncio.wait({pump})  # the HTTP connection is closed once the pump has ended
            handle.stats = self._finish(reply, finish or "stopped")  # None: the consumer stopped reading

    def stop(self) -> None:
        """End the reply in flight: the HTTP stream is closed, which makes Ollama stop generating."""
        if self._pump is not None:
            self._stopping = True
            self._pump.cancel()

    async def close(self) -> None:
        """Stop any reply and close the connections. The model stays loaded in Ollama until its keep-alive ends."""
        self.stop()
        await self._client.close()
        await self._http.aclose()
        self._model, self._kv = None, None
        self._set_state(StateKind.STOPPED)

    # --- internals ------------------------------------------------------------------------------------------
    async def _pump_chat(self, body: dict[str, Any], queue: asyncio.Queue[Any]) -> None:
        """Read the chat stream of ``body`` into ``queue``; cancelling this task closes the HTTP response.

        The request and its errors are the official client's (``ResponseError``, status -1 for an error line).
        """
        body = {**body, "stream": True}
        if self._keep_alive is not None:
            body["keep_alive"] = self._keep_alive
        try:
            async with self._http.stream("POST", "/api/chat", json=body) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise ollama.ResponseError(response.text, response.status_code)
                async with closing_lines(response) as lines:
                    async for line in lines:
                        if not line.strip():
                            continue
                        part = safe_json.loads_object(line, what="a line of the reply")
                        if error := part.get("error"):
                            raise ollama.ResponseError(str(error))
                        queue.put_nowait(("chunk", ollama.ChatResponse(**part)))
            queue.put_nowait(("end", None))
        except asyncio.CancelledError:
            queue.put_nowait(("stopped", None))
            raise
        except Exception as exc:
            queue.put_nowait(("error", exc))

    async def _running_entry(self, model: str) -> ollama.ProcessResponse.Model | None:
        try:
            ps = await self._client.ps()
        except Exception as exc:  # the model is loaded; a failed ps only costs the details
            log.warning("Ollama /api/ps failed after loading %s: %s", model, exc)
            return None
        wanted = {model, model + ":latest"}
        return next((m for m in ps.models if m.model in wanted or m.name in wanted), None)

    async def _unload_quietly(self, model: str) -> None:
        try:
            await self._client.chat(model=model, messages=[], keep_alive=0)
        except Exception as exc:
            log.info("Could not unload %s from Ollama: %s", model, exc)

    def _load_failure(self, exc: BaseException, model: str) -> str:
        reason = connection_failure(exc, self.host, f"loading {model}")
        if reason:
            return reason
        if isinstance(exc, ollama.ResponseError):
            if exc.status_code == 404:
                return f"Ollama has no model named '{model}'. Pull it first (`ollama pull {model}`) or pick another."
            return f"Ollama could not load {model}: {exc.error}"
        log.exception("Unexpected failure loading %s from Ollama", model)
        return f"Loading {model} through Ollama failed: {exc}"

    def _generation_error(self, exc: BaseException, partial: str) -> BackendError:
        kept = " The partial reply was kept." if partial else ""
        reason = connection_failure(exc, self.host, "generating a reply")
        if reason:
            if isinstance(exc, httpx.ConnectError | ConnectionError):
                self._model, self._kv = None, None
                self._set_state(StateKind.FAILED, reason + " Load the model again to continue.")
            return GenerationError(reason + kept, partial)
        if isinstance(exc, ollama.ResponseError):
            if exc.status_code == 404:
                return GenerationError(
                    f"Ollama no longer has the model: {exc.error}. Pull it again or load another model.", partial
                )
            if exc.status_code == -1:  # an {"error"} line in the stream
                return GenerationError(f"Ollama stopped with an error: {exc.error}.{kept}", partial)
            if exc.status_code == 400:  # the request as asked (a schema, tools for a model without them)
                return RequestRefusedError(f"Ollama refused the request: {exc.error}", partial)
            return GenerationError(f"Ollama could not generate a reply: {exc.error} (HTTP {exc.status_code}).", partial)
        log.error("Unexpected failure streaming from Ollama: %r", exc)
        return GenerationError(f"Generating through Ollama failed: {exc}.{kept}", partial)

    def _finish(self, reply: _Reply, finish: str) -> ReplyStats:
        now = time.perf_counter()
        final = reply.final
        completion = len(reply.parts)
        decode = None
        if reply.first_at and reply.last_at and completion > 1 and reply.last_at > reply.first_at:
            decode = (completion - 1) / (reply.last_at - reply.first_at)
        prompt = 0
        if final is not None:
            prompt = final.prompt_eval_count or 0
            completion = final.eval_count if final.eval_count is not None else completion
            if final.eval_count and final.eval_duration:
                decode = final.eval_count / final.eval_duration * 1e9
        self._stats = stats = ReplyStats(
            prompt_tokens=prompt,
            completion_tokens=completion,
            ttft_ms=(reply.first_at - reply.sent_at) * 1000 if reply.first_at else None,
            decode_tokens_per_s=decode,
            total_ms=(now - reply.sent_at) * 1000,
            finish_reason=finish,
        )
        if final is not None and self._model is not None:
            self._kv = KvUsage(min(prompt + completion, self._model.n_ctx), self._model.n_ctx)
        if self._model is not None:
            self._set_state(StateKind.READY, self._model.name)
        elif self._state.kind is StateKind.GENERATING:
            self._set_state(StateKind.STOPPED)
        return stats


def _model_info(
    model: str,
    show: ollama.ShowResponse,
    running: ollama.ProcessResponse.Model | None,
    params: LoadParams,
    seconds: float,
    host: str,
) -> ModelInfo:
    info: dict[str, Any] = dict(show.modelinfo or {})
    details = show.details
    arch = info.get("general.architecture") or (details.family if details else None)
    n_ctx_train = info.get(f"{arch}.context_length") if arch else None
    blocks = info.get(f"{arch}.block_count") if arch else None
    n_ctx = params.n_ctx
    gpu_layers = 0
    offload = False
    metadata: dict[str, str] = {"backend": "ollama", "host": host}
    if details is not None:
        for key in ("family", "parameter_size", "quantization_level", "format"):
            if getattr(details, key, None):
                metadata[key] = str(getattr(details, key))
    if show.capabilities:
        metadata["capabilities"] = ", ".join(show.capabilities)
    if running is not None:
        n_ctx = running.context_length or n_ctx
        size, vram = int(running.size or 0), int(running.size_vram or 0)
        metadata["size"], metadata["size_vram"] = str(size), str(vram)
        offload = vram > 0
        if size and vram >= size:
            gpu_layers = int(blocks) + 1 if isinstance(blocks, int) else -1
        elif size and vram and isinstance(blocks, int):
            gpu_layers = round((int(blocks) + 1) * vram / size)  # an estimate: Ollama reports bytes, not layers
    return ModelInfo(
        path=model,
        name=model,
        architecture=str(arch) if arch else None,
        n_ctx=int(n_ctx),
        n_ctx_train=int(n_ctx_train) if isinstance(n_ctx_train, int) else None,
        n_gpu_layers=gpu_layers,
        chat_format=None,
        chat_format_reason="Ollama formats the prompt with the model's own template",
        load_seconds=seconds,
        gpu_offload_supported=offload,
        metadata=metadata,
        vision="vision" in (show.capabilities or ()),
    )
