"""The batch runner: many requests through one OpenAI-compatible server (vLLM, llama.cpp server…), at once.

Every request streams (``stream_options.include_usage``) so that TTFT and token counts are measured, at most
``concurrency`` are in flight over one keep-alive connection pool, and each result is appended to the output
JSONL the moment it finishes: a crash loses only what was still generating, and a re-run skips the ids that
already finished without an error. The latest line for an id is the one that counts (failed ids are retried
and appended again).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from app.backends.http_json import response_json, response_json_or_none
from app.backends.http_lines import MAX_LINE_BYTES, closing_byte_lines
from app.backends.openai_stream import Reply, StreamError, absorb_delta, sse_data
from app.backends.server_url import normalize_server_url
from app.core import safe_json
from app.core.batch.input import BatchRequest, length_priorities, percentiles, read_finished_ids, shortest_first
from app.core.chat.reply_reader import ReplyReader
from app.core.errors import AppError, ErrorKind, InvalidInputError
from app.core.lazy_import import lazy_import
from app.core.user_files import human_limit

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_import("httpx")  # ~100 ms: loaded when first used


Order = Literal["input", "shortest"]
ProgressCallback = Callable[["BatchProgress"], None]
ERROR_TEXT_CHARS = 300


class BatchError(AppError):
    """The batch cannot go on: the server is unreachable or refuses us, or the output file is unusable.
    ``setting`` says which setting fixes it (``"endpoint"``, ``"api_key"``, ``"model"``, ``"output"``)."""

    kind = ErrorKind.UNAVAILABLE


@dataclass(frozen=True)
class RequestResult:
    """One finished request, as written to the output JSONL (``error`` is None on success)."""

    id: str
    output: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BatchProgress:
    """A snapshot while the batch runs; ``total`` counts this run's requests (skipped ids excluded).

    ``output_tokens`` is exact (usage) for finished requests plus streamed chunks, about one token each, for
    those in flight; ``output_tokens_per_s`` divides it by the time since the first request was launched.
    """

    total: int
    done: int
    failed: int
    in_flight: int
    skipped: int
    output_tokens: int
    elapsed_s: float

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the request rate so far; None until one request has finished."""
        finished = self.done + self.failed
        if not finished:
            return None
        return (self.total - finished) * self.elapsed_s / finished


@dataclass(frozen=True)
class BatchSummary:
    """The figures at the end of a run. Latency and TTFT percentiles are nearest-rank, over successes only."""

    model: str
    count: int
    done: int
    failed: int
    skipped: int
    cancelled: bool
    wall_s: float
    output_tokens: int
    output_tokens_per_s: float
    latency_ms: dict[str, float | None]
    ttft_ms: dict[str, float | None]
    first_error: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _RunState:
    total: int
    skipped: int
    started: float = field(default_factory=time.perf_counter)
    done: int = 0
    failed: int = 0
    in_flight: int = 0
    finished_tokens: int = 0
    live_chunks: int = 0  # content chunks streamed by requests still in flight
    latencies_ms: list[float] = field(default_factory=list)
    ttfts_ms: list[float] = field(default_factory=list)
    first_error: str | None = None
    fatal: BatchError | None = None

    def snapshot(self) -> BatchProgress:
        elapsed = time.perf_counter() - self.started
        tokens = self.finished_tokens + self.live_chunks
        return BatchProgress(self.total, self.done, self.failed, self.in_flight, self.skipped, tokens, elapsed)


class ResultWriter:
    """Appends one JSON line per result with a single ``os.write`` (O_APPEND), so lines on disk are whole."""

    def __init__(self, path: Path, fsync_interval_s: float) -> None:
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise BatchError(
                f"cannot write {path}: {exc.strerror or exc}; choose another output file", setting="output"
            ) from None
        self._path = path
        self._interval_s = fsync_interval_s
        self._synced_at = time.monotonic()
        self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-fsync")
        self._pending: Future[None] | None = None

    def write(self, record: dict[str, Any]) -> None:
        data = memoryview((json.dumps(record, ensure_ascii=False) + "\n").encode())
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError as exc:
            raise BatchError(f"cannot write {self._path}: {exc.strerror or exc}") from None
        if self._interval_s <= 0:
            os.fsync(self._fd)
        elif time.monotonic() - self._synced_at >= self._interval_s and (not self._pending or self._pending.done()):
            self._synced_at = time.monotonic()
            self._pending = self._syncer.submit(os.fsync, self._fd)

    def close(self) -> None:
        self._syncer.shutdown(wait=True)
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)


def server_message(response: httpx.Response) -> str:
    """The error text an OpenAI-style server put in its body, else the status line."""
    body = response_json_or_none(response, what="the error answer")
    message: Any = None
    if isinstance(body, dict):
        error = body.get("error")
        message = (
            error.get("message") if isinstance(error, dict) else error or body.get("message") or body.get("detail")
        )
    text = str(message or response.text or response.reason_phrase).strip().replace("\n", " ")
    return f"HTTP {response.status_code}: {text[:ERROR_TEXT_CHARS]}"


def _refused(endpoint: str, response: httpx.Response) -> BatchError:
    message = f"the server at {endpoint} refused the API key ({server_message(response)}); check the API key"
    return BatchError(message, setting="api_key")


def _unreachable(endpoint: str, exc: Exception) -> BatchError:
    reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return BatchError(
        f"cannot reach the server at {endpoint} ({reason}); start it or check the address", setting="endpoint"
    )


async def find_model(client: httpx.AsyncClient, endpoint: str, connect_timeout_s: float | None = 10.0) -> str:
    """The first model the server lists at ``/v1/models``; BatchError when it does not answer or refuses the key."""
    try:
        response = await client.get("/v1/models", timeout=httpx.Timeout(30.0, connect=connect_timeout_s))
    except httpx.HTTPError as exc:
        raise _unreachable(endpoint, exc) from None
    if response.status_code in (401, 403):
        raise _refused(endpoint, response)
    try:
        data: Any = response_json(response, what="/v1/models").get("data") if response.status_code == 200 else None
        return str(data[0]["id"])
    except (ValueError, AttributeError, LookupError, TypeError):  # ValueError: JsonError (not JSON, nested, large)
        raise BatchError(
            f"could not find the served model at {endpoint}/v1/models; give the served model's name", setting="model"
        ) from None


class BatchRunner:
    """Runs requests against ``endpoint`` with at most ``concurrency`` in flight.

    ``order="shortest"`` launches the shortest prompts first; ``priority=True`` also sends vLLM's ``priority``
    field (shorter prompts get lower values, which vLLM runs first when started with
    ``--scheduling-policy priority``). ``fsync_interval_s`` bounds what a power cut can lose: every line is
    written to the OS at once (a killed process loses nothing finished); ``os.fsync`` runs in a helper thread
    at most that often (0: after every line, blocking the event loop ~0.15 ms each) and at the end.
    """

    def __init__(
        self,
        endpoint: str,
        api_key: str | None = None,
        model: str | None = None,
        concurrency: int = 8,
        order: Order = "input",
        priority: bool = False,
        fsync_interval_s: float = 1.0,
        connect_timeout_s: float = 10.0,
        progress_interval_s: float = 0.5,
    ) -> None:
        if concurrency < 1:
            raise InvalidInputError("concurrency must be at least 1", setting="concurrency")
        if order not in ("input", "shortest"):
            raise InvalidInputError('order must be "input" or "shortest"')
        self.endpoint = normalize_server_url(endpoint)
        self.model = model
        self.concurrency = concurrency
        self.order: Order = order
        self.priority = priority
        self.fsync_interval_s = fsync_interval_s
        self.progress_interval_s = progress_interval_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(None, connect=connect_timeout_s)
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._priorities: dict[str, int] = {}

    def cancel(self) -> None:
        """Stop launching and cancel the requests in flight; what finished stays written. Call on the loop's thread."""
        self._stop.set()
        for task in list(self._tasks):
            task.cancel()

    async def run(
        self, requests: Sequence[BatchRequest], output_path: str | Path, progress: ProgressCallback | None = None
    ) -> BatchSummary:
        """Run every request whose id has not already finished in ``output_path``; return the summary.

        Raises BatchError when the server cannot be reached or refuses the key, or the output is unusable;
        results finished before that stay in the file. The model, when not given, is the first at /v1/models.
        """
        self._stop.clear()
        done_before, notes = read_finished_ids(Path(output_path))
        todo = [r for r in requests if r.id not in done_before]
        if self.order == "shortest":
            todo = shortest_first(todo)
        self._priorities = length_priorities(todo) if self.priority else {}
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(
            base_url=self.endpoint, headers=self._headers, timeout=self._timeout, limits=limits
        ) as client:
            model = self.model or await find_model(client, self.endpoint, self._timeout.connect)
            state = _RunState(total=len(todo), skipped=len(requests) - len(todo))
            writer = ResultWriter(Path(output_path), self.fsync_interval_s)
            ticker = asyncio.create_task(self._tick(state, progress)) if progress else None
            try:
                await self._launch(client, model, todo, writer, state)
            finally:
                if ticker:
                    ticker.cancel()
                writer.close()
        if progress:
            progress(state.snapshot())
        if state.fatal:
            raise state.fatal
        return self._summary(model, state, notes)

    async def _tick(self, state: _RunState, progress: ProgressCallback) -> None:
        while True:
            progress(state.snapshot())
            await asyncio.sleep(self.progress_interval_s)

    async def _launch(
        self, client: httpx.AsyncClient, model: str, todo: list[BatchRequest], writer: ResultWriter, state: _RunState
    ) -> None:
        slots = asyncio.Semaphore(self.concurrency)

        def finished(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            slots.release()

        try:
            for request in todo:
                await slots.acquire()
                if self._stop.is_set():
                    break
                task = asyncio.create_task(self._one(client, model, request, writer, state))
                self._tasks.add(task)
                task.add_done_callback(finished)
            while self._tasks:
                await asyncio.wait(set(self._tasks))
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(set(self._tasks))

    async def _one(
        self, client: httpx.AsyncClient, model: str, request: BatchRequest, writer: ResultWriter, state: _RunState
    ) -> None:
        state.in_flight += 1
        try:
            result = await self._request(client, model, request, state)
            writer.write(result.to_dict())
        except (httpx.ConnectError, BatchError) as exc:  # nothing more can succeed: stop the batch
            fatal = exc if isinstance(exc, BatchError) else _unreachable(self.endpoint, exc)
            state.fatal = state.fatal or fatal
            self.cancel()
            return
        finally:
            state.in_flight -= 1
        if result.error is None:
            state.done += 1
            state.finished_tokens += result.completion_tokens
            state.latencies_ms.append(result.latency_ms)
            if result.ttft_ms is not None:
                state.ttfts_ms.append(result.ttft_ms)
        else:
            state.failed += 1
            state.first_error = state.first_error or f"{request.id}: {result.error}"

    def request_body(self, model: str, request: BatchRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``: its own fields win over the runner's model and priority."""
        body: dict[str, Any] = {"model": model}
        if request.id in self._priorities:
            body["priority"] = self._priorities[request.id]
        body.update(request.params)
        if request.messages is not None:
            body["messages"] = request.messages
        else:
            body["prompt"] = request.prompt
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return body

    async def _request(
        self, client: httpx.AsyncClient, model: str, request: BatchRequest, state: _RunState, retry: bool = True
    ) -> RequestResult:
        path = "/v1/chat/completions" if request.is_chat else "/v1/completions"
        stream = _Stream(request.is_chat, state)
        started = time.perf_counter()
        answered = False
        try:
            async with client.stream("POST", path, json=self.request_body(model, request)) as response:
                answered = True
                if response.status_code >= 400:
                    await response.aread()
                    if response.status_code in (401, 403):
                        raise _refused(self.endpoint, response)
                    stream.error = self._explain(server_message(response))
                else:
                    await stream.read(response)
        except httpx.ConnectError:
            raise
        except httpx.TransportError as exc:
            if retry and not answered:  # e.g. a keep-alive connection the server closed just as we sent
                return await self._request(client, model, request, state, retry=False)
            stream.error = f"connection lost ({type(exc).__name__}: {exc or 'no detail'})"
        finally:
            state.live_chunks -= stream.chunks
        return stream.result(request.id, started)

    def _explain(self, message: str) -> str:
        if self._priorities and "priority" in message.lower():
            return f"{message} — start vLLM with --scheduling-policy priority, or run without request priorities"
        return message

    def _summary(self, model: str, state: _RunState, notes: list[str]) -> BatchSummary:
        wall = time.perf_counter() - state.started
        return BatchSummary(
            model=model,
            count=state.total,
            done=state.done,
            failed=state.failed,
            skipped=state.skipped,
            cancelled=self._stop.is_set(),
            wall_s=wall,
            output_tokens=state.finished_tokens,
            output_tokens_per_s=state.finished_tokens / wall if wall > 0 else 0.0,
            latency_ms=percentiles(state.latencies_ms),
            ttft_ms=percentiles(state.ttfts_ms),
            first_error=state.first_error,
            notes=notes,
        )


class _Stream:
    """Reads one SSE response: each chunk through the one chunk reader (``absorb_delta``: text, usage, finish
    reason, the time of the first token) and its pieces through the one reply reader (the answer's text, as the
    chat and the API server read it), or the error that ends it."""

    def __init__(self, is_chat: bool, state: _RunState) -> None:
        self.is_chat = is_chat
        self.state = state
        self.reply = Reply(sent_at=time.perf_counter())
        self.reader = ReplyReader()  # no parser: the server's text is all answer, its own thinking apart
        self.chunks = 0
        self.error: str | None = None
        self.ended = False

    async def read(self, response: httpx.Response) -> None:
        """Take each event of the body, read as bytes (JSON is parsed from them, so bad UTF-8 stays an error)."""
        try:
            async with closing_byte_lines(response) as lines:
                async for line in lines:
                    data = sse_data(line)
                    if data is not None and self._event(data):
                        return
        except safe_json.JsonError:  # a line over the bound: the reader stopped at the limit
            self.error = f"the server sent a stream line larger than {human_limit(MAX_LINE_BYTES)}"
        self.reader.finish()

    def _event(self, data: bytes) -> bool:
        """Take one ``data:`` payload; True on an error (stop reading and drop the connection)."""
        if data == b"[DONE]":
            self.ended = True
            return False
        try:
            chunk = safe_json.loads(data, what="the chunk")
        except safe_json.JsonError as exc:  # malformed, nested too deeply or too large: this request fails
            self.error = f"the server sent a stream chunk this app cannot read ({exc}): {data[:80]!r}"
            return True
        if not isinstance(chunk, dict):
            self.error = f"the server sent a malformed stream chunk: {data[:80]!r}"
            return True
        try:
            delta = absorb_delta(self.reply, chunk)
        except StreamError as exc:
            self.error = f"the server reported an error mid-stream: {str(exc)[:ERROR_TEXT_CHARS]}"
            return True
        if delta is not None:
            self.reader.feed(delta)
            if delta.text or delta.reasoning:
                self.chunks += 1
                self.state.live_chunks += 1
        return False

    def result(self, request_id: str, started: float) -> RequestResult:
        now = time.perf_counter()
        finish_reason = self.reply.finish
        if self.error is None and not self.ended and finish_reason is None:
            self.error = "the stream ended before the server finished the reply"
        usage = self.reply.usage or {}
        first_at = self.reply.first_at
        return RequestResult(
            id=request_id,
            output=self.reader.content,
            finish_reason=finish_reason,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=int(usage.get("completion_tokens", self.chunks)),
            latency_ms=(now - started) * 1000,
            ttft_ms=(first_at - started) * 1000 if first_at is not None else None,
            error=self.error,
        )
