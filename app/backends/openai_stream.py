"""Streaming replies from an OpenAI-compatible ``/v1/chat/completions`` server (vLLM and its kind).

The pieces any client of such a server needs, whatever drives it (``VllmBackend``, a batch runner):
``request_body`` builds the streaming request, ``sse_data`` reads a server-sent event line, ``Reply`` keeps one
reply's text, timings and usage (``absorb`` takes a chunk into it), ``error_message`` finds the error text in a
payload, and ``ChatStream`` is one reply a consumer iterates and may ``stop()``. ``run_reply`` ties them
together: it streams one reply into a ``ChatStream``, telling its owner when the reply begins and ends and
asking it to word any failure.

Failures reach ``failure`` as ``HttpError`` (a status other than 200), ``StreamTruncated`` (no ``[DONE]``),
``StreamError`` (an error event in the stream), ``httpx.HTTPError`` or ``JsonError``, a ``ValueError`` (a chunk
that is not JSON, is nested too deeply or is too large).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from app.backends.http_json import response_json_or_none
from app.backends.http_lines import closing_lines
from app.backends.protocol import Delta
from app.backends.raw_http import KeptAlivePoster
from app.backends.streamed_reply import StreamedReply
from app.core import safe_json
from app.core.chat.conversation import ReplyStats
from app.core.lazy_import import lazy_import
from app.core.params import GenerationOptions, SamplingParams

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_import("httpx")  # ~100 ms: loaded when first used


CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
DONE = "[DONE]"  # the data of the last server-sent event


def stream_timeout() -> httpx.Timeout:
    """No read limit: a request may queue for minutes behind others; 5 s to connect."""
    return httpx.Timeout(None, connect=5.0)


# --- requests and payloads ---------------------------------------------------------------------------------
def openai_client(
    base_url: str, api_key: str | None, *, connections: int = 512, keepalive: int = 64, verify: Any = True
) -> httpx.AsyncClient:
    """A client for the server at ``base_url`` (``http://host:port``), sending ``api_key`` as a bearer token."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=keepalive)
    return httpx.AsyncClient(
        base_url=base_url, headers=headers, timeout=stream_timeout(), limits=limits,
        follow_redirects=False, trust_env=False, verify=verify,
    )  # fmt: skip


class ClientLanes:
    """Several clients to one server, handed out in turn, each made on first use.

    httpcore's pool looks at every connection it holds (a readability check, a system call each) whenever a
    request starts or ends, so one pool with 32 replies in flight spends milliseconds of CPU per request — CPU
    that a vLLM server on the same cores needs. Lanes of a few connections each keep that cost small.
    """

    def __init__(self, base_url: str, api_key: str | None, lanes: int = 8) -> None:
        self._base_url, self._api_key = base_url, api_key
        self._clients: list[httpx.AsyncClient | None] = [None] * lanes
        self._turn = 0
        self._tls: Any = None  # one TLS context (with the system's certificates) for every lane

    @property
    def first(self) -> httpx.AsyncClient:
        """The client for one-off requests (health, models, metrics)."""
        return self._lane(0)

    def next(self) -> httpx.AsyncClient:
        """The client for the next reply."""
        self._turn = (self._turn + 1) % len(self._clients)
        return self._lane(self._turn)

    def _lane(self, index: int) -> httpx.AsyncClient:
        client = self._clients[index]
        if client is None:
            if self._tls is None:
                self._tls = httpx.create_ssl_context()
            lanes = len(self._clients)
            client = self._clients[index] = openai_client(
                self._base_url, self._api_key, connections=max(512 // lanes, 8), keepalive=max(64 // lanes, 4),
                verify=self._tls,
            )  # fmt: skip
        return client

    async def aclose(self) -> None:
        for client in self._clients:
            if client is not None:
                await client.aclose()


def request_body(
    model: str, messages: list[dict[str, Any]], params: SamplingParams, options: GenerationOptions | None = None
) -> dict[str, Any]:
    """The streaming ``/v1/chat/completions`` body: sampling in vLLM's terms (typical_p has no equivalent), and
    ``options`` as OpenAI's fields (vLLM enforces ``response_format`` and parses tool calls itself)."""
    return {**_sampling_body(model, params, options), "messages": messages, **_options_body(options, chat=True)}


def completion_body(
    model: str, prompt: str, params: SamplingParams, options: GenerationOptions | None = None
) -> dict[str, Any]:
    """The streaming ``/v1/completions`` body for a raw ``prompt``."""
    return {**_sampling_body(model, params, options), "prompt": prompt, **_options_body(options, chat=False)}


def _options_body(options: GenerationOptions | None, *, chat: bool) -> dict[str, Any]:
    if options is None:
        return {}
    body: dict[str, Any] = {}
    if options.format_type != "text":
        body["response_format"] = options.response_format
    if chat and options.tools:
        body["tools"] = options.tools
        body["tool_choice"] = options.tool_choice or "auto"
        if not options.parallel_calls:  # one call when a call is forced, unless several were asked
            body["parallel_tool_calls"] = False
    if chat:
        body.update(thinking_fields(options))
    if options.echo and not chat:  # the prompt first (with its tokens' logprobs when asked): vLLM does it itself
        body["echo"] = True
    if options.logprobs:  # chat: a flag and a count; completions: the count itself
        if chat:
            body["logprobs"] = True
            body["top_logprobs"] = options.top_logprobs or 0
        else:
            body["logprobs"] = options.top_logprobs or 0
    return body


def thinking_fields(options: GenerationOptions) -> dict[str, Any]:
    """Thinking switches as vLLM takes them: ``reasoning_effort`` at the top (gpt-oss), on/off as
    ``chat_template_kwargs`` under both names chat templates use (``enable_thinking``: Qwen3, GLM;
    ``thinking``: DeepSeek-V3.1, Granite); a template ignores the variables it does not read."""
    body: dict[str, Any] = {}
    if options.reasoning_effort is not None:
        body["reasoning_effort"] = options.reasoning_effort
    if options.enable_thinking is not None:
        on = options.enable_thinking
        body["chat_template_kwargs"] = {"enable_thinking": on, "thinking": on}
    return body


# SamplingParams' names for vLLM's request fields
_SAMPLING_FIELDS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                    "repeat_penalty": "repetition_penalty", "presence_penalty": "presence_penalty",
                    "frequency_penalty": "frequency_penalty", "seed": "seed", "stop": "stop"}  # fmt: skip


def _sampling_body(model: str, params: SamplingParams, options: GenerationOptions | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,  # -1 disables top-k in every vLLM version
        "min_p": params.min_p,
        "repetition_penalty": params.repeat_penalty,
        "presence_penalty": params.presence_penalty,
        "frequency_penalty": params.frequency_penalty,
    }
    if params.max_tokens is not None:
        body["max_tokens"] = params.max_tokens
    if params.seed is not None:
        body["seed"] = params.seed
    if params.stop:
        body["stop"] = list(params.stop)
    for name in options.server_defaults if options is not None else ():  # the server's (the model's) defaults
        body.pop(_SAMPLING_FIELDS.get(name, ""), None)
    return body


def error_message(payload: Any) -> str | None:
    """vLLM's error text from ``{"error": {"message"}}`` (0.10+), ``{"object": "error", "message"}`` or
    ``{"error": "…"}``; None when ``payload`` is not an error."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error)
    if isinstance(error, str):
        return error
    if payload.get("object") == "error":
        return str(payload.get("message") or "unknown error")
    return None


def json_or_none(response: httpx.Response) -> Any:
    """The response's JSON, or None when its body is not JSON (or too deep, or too large)."""
    return response_json_or_none(response, what="the server's answer")


class HttpError(Exception):
    """The server answered the request with a status other than 200; the text is its error message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class StreamTruncated(Exception):
    """The stream ended without ``data: [DONE]``."""


class StreamError(Exception):
    """An ``{"error": …}`` event in the stream."""


# --- server-sent events ------------------------------------------------------------------------------------


@overload
def sse_data(line: str) -> str | None: ...
@overload
def sse_data(line: bytes) -> bytes | None: ...
def sse_data(line: str | bytes) -> str | bytes | None:
    """The data of a server-sent ``data:`` line (``DONE`` at the end of the stream); None for any other line.

    Text or bytes alike: a reader that parses the JSON from bytes keeps malformed UTF-8 an error."""
    if isinstance(line, bytes):
        return line[5:].strip() if line.startswith(b"data:") else None
    return line[5:].strip() if line.startswith("data:") else None


# --- one reply ---------------------------------------------------------------------------------------------
@dataclass
class Reply:
    """One reply's bookkeeping: its text so far, when it was sent and streamed, how it finished, its usage."""

    sent_at: float
    parts: list[str] = field(default_factory=list)
    first_at: float | None = None
    last_at: float | None = None
    finish: str | None = None
    usage: dict[str, Any] | None = None
    stop_sequence: str | None = None  # the stop string that ended it (vLLM's ``stop_reason``)

    def stats(self, finish: str) -> ReplyStats:
        completion = int(self.usage.get("completion_tokens") or 0) if self.usage else len(self.parts)
        decode = None
        if self.first_at and self.last_at and completion > 1 and self.last_at > self.first_at:
            decode = (completion - 1) / (self.last_at - self.first_at)
        return ReplyStats(
            prompt_tokens=int(self.usage.get("prompt_tokens") or 0) if self.usage else 0,
            completion_tokens=completion,
            ttft_ms=(self.first_at - self.sent_at) * 1000 if self.first_at else None,
            decode_tokens_per_s=decode,
            total_ms=(time.perf_counter() - self.sent_at) * 1000,
            finish_reason=finish,
            stop_sequence=self.stop_sequence if finish == "stop" else None,
        )


def absorb(reply: Reply, chunk: Any) -> str:
    """Take one SSE chunk into ``reply``; returns its text. Raises StreamError for an error event.

    Parts of the wrong shape (a server's bug, or a hostile one) are ignored rather than raised."""
    delta = absorb_delta(reply, chunk)
    return delta.text if delta is not None else ""


def absorb_delta(reply: Reply, chunk: Any) -> Delta | None:
    """As ``absorb``, the chunk's whole piece: text (a chat delta's ``content`` or a completion's ``text``),
    tool-call pieces and logprobs (chat: ``logprobs.content``; completions: turned into that shape); None when
    the chunk carries none of them."""
    message = error_message(chunk)
    if message is not None:
        raise StreamError(message)
    if not isinstance(chunk, dict):
        return None
    if isinstance(usage := chunk.get("usage"), dict) and usage:
        reply.usage = usage
    text, reasoning, calls, logprobs = "", "", [], []
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        delta: dict[str, Any] = choice["delta"] if isinstance(choice.get("delta"), dict) else {}
        content = delta.get("content", choice.get("text"))
        text += content if isinstance(content, str) else ""
        reasoning += _reasoning(delta)
        calls += [c for c in delta.get("tool_calls") or [] if isinstance(c, dict)]
        logprobs += _logprob_entries(choice.get("logprobs"))
        reply.finish = choice.get("finish_reason") or reply.finish
        if isinstance(stop := choice.get("stop_reason"), str) and stop:  # a stop string; an int is a token id
            reply.stop_sequence = stop
    if text or calls or reasoning:
        now = time.perf_counter()
        reply.first_at = reply.first_at or now
        reply.last_at = now
        reply.parts.append(text)
    if not (text or calls or logprobs or reasoning):
        return None
    return Delta(text, logprobs=logprobs or None, tool_calls=calls or None, reasoning=reasoning)


def _reasoning(delta: dict[str, Any]) -> str:
    """The thinking in a chat delta: vLLM's ``reasoning_content`` (its reasoning parsers), or ``reasoning``
    (vLLM 0.10+ and others); a whole message carries the same fields."""
    for key in ("reasoning_content", "reasoning"):
        value = delta.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _logprob_entries(logprobs: Any) -> list[dict[str, Any]]:
    """OpenAI chat entries from a chat ``logprobs.content`` or a completion's ``tokens``/``token_logprobs``."""
    if not isinstance(logprobs, dict):
        return []
    if isinstance(logprobs.get("content"), list):
        return [e for e in logprobs["content"] if isinstance(e, dict)]
    tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
    if not isinstance(tokens, list) or not isinstance(values, list):
        return []
    tops: list[Any] = logprobs["top_logprobs"] if isinstance(logprobs.get("top_logprobs"), list) else []
    tops += [None] * (len(tokens) - len(tops))
    return [
        {"token": token, "logprob": value, "bytes": list(str(token).encode()),
         "top_logprobs": [{"token": t, "logprob": v, "bytes": list(str(t).encode())} for t, v in (top or {}).items()]}
        for token, value, top in zip(tokens, values, tops, strict=False)
    ]  # fmt: skip


class ChatStream(StreamedReply):
    """One streamed reply (``StreamedReply``) whose ``stop()`` closes its HTTP request, which makes the server abort
    it (finish "stopped")."""

    def __init__(self, run: Callable[[ChatStream], AsyncGenerator[Delta, None]]) -> None:
        self._pump: asyncio.Task[None] | None = None
        super().__init__(run)  # type: ignore[arg-type]  # run is given this ChatStream

    def stop(self) -> None:
        super().stop()
        if self._pump is not None:
            self._pump.cancel()


# --- streaming one reply -----------------------------------------------------------------------------------
async def run_reply(
    stream: ChatStream,
    body: dict[str, Any],
    *,
    client: Callable[[], httpx.AsyncClient],
    path: str = CHAT_PATH,
    whole: bool = False,
    begin: Callable[[ChatStream], None] | None = None,
    end: Callable[[ChatStream, ReplyStats], None] | None = None,
    failure: Callable[[BaseException, str], Exception],
    poster: KeptAlivePoster | None = None,
) -> AsyncGenerator[Delta, None]:
    """Stream the reply to ``body`` into ``stream``: ``ChatStream(lambda s: run_reply(s, body, ...))``.

    ``client()`` is asked for the HTTP client once the reply starts. ``begin(stream)`` runs when it starts;
    ``end(stream, stats)`` once it has ended however it ended, its request closed and ``stream.stats`` set.
    A failure is raised as ``failure(exc, partial_text)``. The finish reason is "stopped" when ``stop()`` ended
    the reply or the consumer stopped reading, "error" after a failure, else the server's ("stop" by default).
    With ``whole`` the server is asked for the reply in one piece (no SSE): one delta carries all of it, sent by
    ``poster`` when given (a lean kept-alive POST; see ``raw_http``).
    """
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    reply = Reply(sent_at=time.perf_counter())
    reading = _pump_whole(poster or client(), body, queue, path) if whole else _pump(client(), body, queue, path)
    stream._pump = asyncio.create_task(reading)
    if begin is not None:
        begin(stream)
    finish: str | None = None
    try:
        while True:
            kind, value = await queue.get()
            if stream.stopping or kind == "stopped":
                finish = "stopped"
                return
            if kind == "end":
                finish = reply.finish or "stop"
                return
            delta = None
            if kind == "chunk":
                try:
                    delta = absorb_delta(reply, value)
                except StreamError as exc:
                    kind, value = "error", exc
            if kind == "error":
                finish = "error"
                raise failure(value, "".join(reply.parts))
            if delta is not None:
                yield delta
    finally:
        pump = stream._pump
        if not pump.done():
            pump.cancel()
        await asyncio.wait({pump})  # the HTTP request is closed once the pump has ended
        stream.stats = stats = reply.stats(finish or "stopped")  # None: the consumer stopped reading
        if end is not None:
            end(stream, stats)


async def _pump_whole(
    client: httpx.AsyncClient | KeptAlivePoster, body: dict[str, Any], queue: asyncio.Queue[tuple[str, Any]],
    path: str,
) -> None:  # fmt: skip
    """Ask for the reply in one piece (``stream`` off: a server's SSE costs it CPU per token) and put it into
    ``queue`` as one chunk in the streamed shape; cancelling this task closes the HTTP request."""
    body = {key: value for key, value in body.items() if key != "stream_options"} | {"stream": False}
    try:
        status, payload, text = await _post_whole(client, path, body)
        if status != 200:
            raise HttpError(status, error_message(payload) or text)
        queue.put_nowait(("chunk", whole_as_chunk(payload)))
        queue.put_nowait(("end", None))
    except asyncio.CancelledError:
        queue.put_nowait(("stopped", None))
        raise
    except Exception as exc:
        queue.put_nowait(("error", exc))


async def _post_whole(
    client: httpx.AsyncClient | KeptAlivePoster, path: str, body: dict[str, Any]
) -> tuple[int, Any, str]:
    """(status, JSON or None, text) of one whole answer."""
    if isinstance(client, KeptAlivePoster):
        status, data = await client.post(path, json.dumps(body, separators=(",", ":")).encode())
        try:
            payload = safe_json.loads(data, what="the server's answer", max_bytes=None)  # the poster bounds it
        except safe_json.JsonError:
            payload = None
        return status, payload, data[:2000].decode("utf-8", "replace")
    response = await client.post(path, json=body)
    return response.status_code, json_or_none(response), response.text


def whole_as_chunk(payload: Any) -> Any:
    """A whole (non-streamed) answer in the shape of one streamed chunk: each choice's ``message`` becomes its
    ``delta`` (tool calls numbered as streamed ones are); errors and odd shapes pass through for ``absorb``."""
    if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
        return payload
    choices = []
    for choice in payload["choices"]:
        if isinstance(choice, dict) and isinstance(message := choice.get("message"), dict):
            calls = message.get("tool_calls")
            if isinstance(calls, list):
                calls = [{**c, "index": i} if isinstance(c, dict) else c for i, c in enumerate(calls)]
                message = {**message, "tool_calls": calls}
            choice = {key: value for key, value in choice.items() if key != "message"} | {"delta": message}
        choices.append(choice)
    return {**payload, "choices": choices}


async def _pump(
    client: httpx.AsyncClient, body: dict[str, Any], queue: asyncio.Queue[tuple[str, Any]], path: str = CHAT_PATH
) -> None:
    """Read the SSE stream of ``path`` into ``queue``; cancelling this task closes the HTTP request."""
    try:
        async with client.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                await response.aread()
                raise HttpError(response.status_code, error_message(json_or_none(response)) or response.text)
            async with closing_lines(response) as lines:
                async for line in lines:
                    data = sse_data(line)
                    if data is None:
                        continue
                    if data == DONE:
                        queue.put_nowait(("end", None))
                        return
                    queue.put_nowait(("chunk", safe_json.loads(data, what="a chunk of the reply")))
        raise StreamTruncated
    except asyncio.CancelledError:
        queue.put_nowait(("stopped", None))
        raise
    except Exception as exc:
        queue.put_nowait(("error", exc))
