"""The endpoints: each reads its body through the bounded JSON loader, resolves the model, holds it loaded
(``router``) while the engine host answers, and writes OpenAI's or Anthropic's shapes. Every failure becomes the
API's own error shape; nothing escapes as a bare 500."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.core import safe_json
from app.core.errors import AppError
from app.core.params import GenerationOptions
from app.services.api import anthropic_render, openai_render
from app.services.api.anthropic_requests import count_call, messages_call
from app.services.api.catalog import ModelCatalog, ServedModel
from app.services.api.choices import ChoiceOuts, ChoiceRuns, choice_sampling, numbered, one_body
from app.services.api.config import ServerConfig
from app.services.api.context import ContextNeed
from app.services.api.errors import ApiError, Dialect, bad_request, from_app_error
from app.services.api.fields import Fields, GenerationCall
from app.services.api.metrics import CONTENT_TYPE, ApiMetrics
from app.services.api.openai_requests import chat_call, completion_call, embedding_inputs
from app.services.api.parallel_route import serial_reason
from app.services.api.records import RequestLog, RequestState, Tracker
from app.services.api.replies import CollectedReply, Out, ReplyRun, collect
from app.services.api.router import Lease, ModelRouter
from app.services.api.sse import DONE, ClientGone, EventStream, data_event, named_event, unless_disconnected
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost
from app.services.engines.parallel_turn import ParallelTurn
from app.services.engines.reply_formats import reply_parser

log = logging.getLogger("app.services.api")

PARSE_OFF_LOOP_BYTES = 256 * 1024  # a larger body is parsed on an executor (the window's loop stays free)
CLIENT_CLOSED = 499  # nginx's "client closed request", for the log and metrics


@dataclass
class Api:
    host: EngineHost
    catalog: ModelCatalog
    router: ModelRouter
    config: ServerConfig
    log: RequestLog
    metrics: ApiMetrics
    replies: set[ReplyRun] = field(default_factory=set)

    def stop_replies(self) -> None:
        """End every reply in flight at its next token (the server is stopping)."""
        for run in list(self.replies):
            run.stream.stop()

    # --- endpoints ------------------------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def prometheus(self, request: Request) -> Response:
        async def work(tracker: Tracker, _body: Any) -> Response:
            tracker.finish(200)
            return Response(self.metrics.render(), media_type=CONTENT_TYPE)

        return await self._serve(request, Dialect.OPENAI, "metrics", work, body=False)

    async def list_models(self, request: Request) -> Response:
        async def work(tracker: Tracker, _body: Any) -> Response:
            models = await self.catalog.models()
            tracker.finish(200)
            data = [m.to_openai(loaded=self.catalog.is_loaded(m)) for m in models]
            return JSONResponse({"object": "list", "data": data})

        return await self._serve(request, Dialect.OPENAI, "models", work, body=False)

    async def get_model(self, request: Request) -> Response:
        async def work(tracker: Tracker, _body: Any) -> Response:
            model = await self.catalog.resolve(request.path_params["model"])
            tracker.finish(200)
            return JSONResponse(model.to_openai(loaded=self.catalog.is_loaded(model)))

        return await self._serve(request, Dialect.OPENAI, "models", work, body=False)

    async def chat_completions(self, request: Request) -> Response:
        async def work(tracker: Tracker, body: dict[str, Any]) -> Response:
            call = chat_call(body, self.config.max_tokens_limit)
            return await self._generate(request, tracker, call, _OpenAIChat(call))

        return await self._serve(request, Dialect.OPENAI, "chat.completions", work)

    async def completions(self, request: Request) -> Response:
        async def work(tracker: Tracker, body: dict[str, Any]) -> Response:
            call = completion_call(body, self.config.max_tokens_limit)
            if call.echo:
                await self._check_echo(call)
            return await self._generate(request, tracker, call, _OpenAIChat(call))

        return await self._serve(request, Dialect.OPENAI, "completions", work)

    async def messages(self, request: Request) -> Response:
        async def work(tracker: Tracker, body: dict[str, Any]) -> Response:
            call = messages_call(body, self.config.max_tokens_limit)
            return await self._generate(request, tracker, call, _AnthropicMessage(call))

        return await self._serve(request, Dialect.ANTHROPIC, "messages", work)

    async def count_tokens(self, request: Request) -> Response:
        async def work(tracker: Tracker, body: dict[str, Any]) -> Response:
            name, messages, tools = count_call(body)
            model = await self._model(tracker, name)
            async with self.router.serving(
                model, on_loading=lambda: tracker.update(state=RequestState.LOADING)
            ) as lease:
                count = await unless_disconnected(request.receive, lease.turn.count_tokens(messages, tools))
            tracker.finish(200, prompt_tokens=count)
            return JSONResponse({"input_tokens": count})

        return await self._serve(request, Dialect.ANTHROPIC, "count_tokens", work)

    async def embeddings(self, request: Request) -> Response:
        async def work(tracker: Tracker, body: dict[str, Any]) -> Response:
            texts = embedding_inputs(body)
            model = await self._model(tracker, body.get("model"))
            keep_alive = _keep_alive(body)
            on_loading = lambda: tracker.update(state=RequestState.LOADING)  # noqa: E731
            async with self.router.serving(
                model, embedding=True, keep_alive=keep_alive, on_loading=on_loading
            ) as lease:
                vectors, tokens = await unless_disconnected(request.receive, lease.turn.embed_counted(texts))
            tracker.finish(200, prompt_tokens=tokens, load_ms=lease.load_ms)
            return JSONResponse(openai_render.embeddings_body(model.id, vectors, body.get("encoding_format"), tokens))

        return await self._serve(request, Dialect.OPENAI, "embeddings", work)

    async def not_found(self, request: Request, status: int) -> Response:
        dialect = Dialect.ANTHROPIC if request.url.path.startswith("/v1/messages") else Dialect.OPENAI
        if status == 405:
            error = ApiError(405, f"{request.method} is not allowed on {request.url.path}.", code="method_not_allowed")
        else:
            error = ApiError(404, f"There is no {request.url.path} here. The API lives under /v1 (e.g. "
                                  "/v1/chat/completions, /v1/messages, /v1/models).", code="not_found")  # fmt: skip
        return JSONResponse(error.body(dialect), status_code=error.status_for(dialect))

    # --- one request ------------------------------------------------------------------------------------------
    async def _serve(
        self, request: Request, dialect: Dialect, endpoint: str,
        work: Callable[[Tracker, Any], Awaitable[Response]], *, body: bool = True,
    ) -> Response:  # fmt: skip
        client = f"{request.client.host}:{request.client.port}" if request.client else "-"
        tracker = self.log.open(client, endpoint)
        self.metrics.started()
        try:
            self._authorize(request)
            return await work(tracker, await self._body(request) if body else None)
        except ApiError as refused:
            return self._error(tracker, dialect, refused)
        except AppError as exc:
            return self._error(tracker, dialect, from_app_error(exc, _engine(tracker)))
        except ClientGone:
            tracker.finish(CLIENT_CLOSED, "the client closed the connection")
            return Response(status_code=CLIENT_CLOSED)
        except Exception as exc:
            log.exception("the API server failed on a %s request", endpoint)
            failed = ApiError(500, f"The server failed on this request ({type(exc).__name__}); see its log.")
            return self._error(tracker, dialect, failed)

    def _error(self, tracker: Tracker, dialect: Dialect, error: ApiError) -> Response:
        status = error.status_for(dialect)
        tracker.finish(status, error.message)
        return JSONResponse(error.body(dialect), status_code=status)

    def _authorize(self, request: Request) -> None:
        key = self.config.api_key
        if not key:
            return
        given = [request.headers.get("x-api-key") or ""]
        scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
        if scheme.lower() == "bearer":
            given.append(token.strip())
        if not any(given):
            raise ApiError(401, "This server needs an API key: send it as 'Authorization: Bearer KEY' or "
                                "'x-api-key: KEY'.", code="missing_api_key")  # fmt: skip
        if not any(hmac.compare_digest(g.encode(), key.encode()) for g in given if g):
            raise ApiError(401, "The API key is not this server's: check the key you were given.",
                           code="invalid_api_key")  # fmt: skip

    async def _body(self, request: Request) -> dict[str, Any]:
        limit = self.config.max_body_bytes
        too_large = ApiError(413, f"The request body is larger than this server's limit of {limit:,} bytes.",
                             code="request_too_large")  # fmt: skip
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise too_large
        parts, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            parts.append(chunk)
        data = b"".join(parts)
        if not data.strip():
            raise bad_request("The request has no body: send a JSON object.", code="invalid_json")
        try:
            if len(data) > PARSE_OFF_LOOP_BYTES:
                return await asyncio.get_running_loop().run_in_executor(None, _parse, data)
            return _parse(data)
        except ValueError as exc:  # JsonError: malformed, nested too deeply, not an object
            raise bad_request(str(exc), code="invalid_json") from None

    async def _check_echo(self, call: GenerationCall) -> None:
        """``echo`` needs the prompt's tokens back: llama.cpp (the worker scores them) and vLLM give them."""
        if (await self.catalog.resolve(call.model)).engine is EngineKind.OLLAMA:
            raise bad_request("'echo' is not supported on Ollama models: Ollama's API does not give the prompt's "
                              "tokens back. Ask without 'echo', or use a GGUF (llama.cpp) or a vLLM model.",
                              param="echo", code="unsupported_parameter")  # fmt: skip

    async def _model(self, tracker: Tracker, name: object) -> ServedModel:
        model = await self.catalog.resolve(name)
        tracker.update(model=model.id, engine=str(model.engine))
        return model

    # --- generation -------------------------------------------------------------------------------------------
    async def _generate(self, request: Request, tracker: Tracker, call: GenerationCall, shape: _Shape) -> Response:
        tracker.update(stream=call.stream)
        model = await self._model(tracker, call.model)
        stack = contextlib.AsyncExitStack()
        try:
            serving, note = await self._serving(tracker, model, call)
            lease = await stack.enter_async_context(serving)
            tracker.update(n_ctx=lease.info.n_ctx, note="; ".join(n for n in (note, lease.note) if n) or None)
            if isinstance(shape, _AnthropicMessage):  # message_start carries the prompt's size: counted first
                await shape.ready(lease)
            run = await self._start(model, lease, call)
            self.replies.add(run)
            stack.callback(self.replies.discard, run)
            stack.push_async_callback(run.close)
            steps = run.steps()
            stack.push_async_callback(steps.aclose)
            if not call.stream:
                reply = await unless_disconnected(request.receive, collect(run, steps, tracker.first_token))
                self._finish(tracker, run, lease)
                return JSONResponse(shape.whole(model.id, reply, run))
            first = await self._first_step(request, steps, tracker, stack)
            source = self._events(shape, model, run, lease, first, steps, tracker, stack)
            owned, stack = stack, contextlib.AsyncExitStack()  # the stream owns the lease and the reply from here on

            async def closed() -> None:
                self._finish(tracker, run, lease, CLIENT_CLOSED, "the client closed the connection")
                await owned.aclose()

            return EventStream(source, closed)
        finally:
            await stack.aclose()

    async def _serving(
        self, tracker: Tracker, model: ServedModel, call: GenerationCall
    ) -> tuple[contextlib.AbstractAsyncContextManager[Lease], str | None]:
        """The request's hold on its model: a place on the parallel llama.cpp engine when the model runs requests
        side by side and this one needs nothing only the single worker does (else the single worker, and the note
        saying why, for the request log)."""
        on_loading = lambda: tracker.update(state=RequestState.LOADING)  # noqa: E731
        slots = await self.router.parallel_slots(model)
        reason = serial_reason(call) if slots > 1 else None
        if slots > 1 and reason is None:
            reason = await self.router.beyond_a_slot(model, ContextNeed.of(call))
        if slots > 1 and reason is None:
            label = f"#{tracker.record.id}"
            parallel = self.router.serving_parallel(model, slots, on_loading=on_loading, keep_alive=call.keep_alive,
                                                    client=tracker.record.client, label=label)  # fmt: skip
            return parallel, None
        note = f"one at a time on the single llama.cpp worker: {reason}" if reason else None
        serving = self.router.serving(model, keep_alive=call.keep_alive, on_loading=on_loading,
                                      need=ContextNeed.of(call))  # fmt: skip
        return serving, note

    async def _start(
        self, model: ServedModel, lease: Lease, call: GenerationCall, choice: int | None = None
    ) -> ReplyRun:
        """The reply, asked in the request's turn: on the model it asked for, nothing between. With ``n`` several
        choices, each a reply of its own (``choices``); ``choice`` is one of them."""
        kind, turn = model.engine, lease.turn
        parallel = isinstance(turn, ParallelTurn)
        if call.n > 1 and choice is None:
            return ChoiceRuns(lambda i: self._start(model, lease, call, i), call.n, engine=str(kind),
                              side_by_side=parallel or self.host.concurrent(kind),
                              want_logprobs=call.options.logprobs)  # fmt: skip
        limit = self.config.max_tokens_limit
        sampling = call.sampling_params(self.router.sampling(model), limit, lease.info.n_ctx)
        sampling = choice_sampling(sampling, choice or 0)
        server_sampling = not self.host.facts(kind).loads_models  # the server's model has its own defaults
        unset = _SERVER_SAMPLING - call.sampling.keys() if server_sampling else frozenset()
        options = replace(
            call.options or GenerationOptions(),
            whole=not call.stream,  # vLLM: the reply in one piece, without SSE's cost per token
            server_defaults=tuple(sorted(unset)),  # vLLM's own (the model's) defaults for what the client left unset
        )
        if call.prompt is not None:
            stream = turn.complete(call.prompt, sampling, options)
            parser = None
        else:
            loaded = turn.loaded if isinstance(turn, ParallelTurn) else self.host.loaded(kind)
            parser = await reply_parser(kind, loaded, options)
            stream = turn.stream_chat(call.messages, sampling, options)
        return ReplyRun(stream, parser, engine=str(kind), want_logprobs=call.options.logprobs)

    async def _first_step(
        self, request: Request, steps: AsyncIterator[list[Out]], tracker: Tracker, stack: contextlib.AsyncExitStack
    ) -> list[Out] | asyncio.Task[list[Out]]:
        """The reply's first step when it comes within the grace time (a failure before it is still an HTTP error),
        else the task that will bring it (the stream starts without it, and pings)."""
        step: asyncio.Task[list[Out]] = asyncio.ensure_future(anext(steps))
        stack.push_async_callback(_cancelled, step)  # before the steps close: a pending anext must end first
        grace = asyncio.wait({step}, timeout=self.config.first_token_grace_s)
        await unless_disconnected(request.receive, grace)
        if not step.done():
            return step
        tracker.first_token()
        return step.result()

    async def _events(
        self, shape: _Shape, model: ServedModel, run: ReplyRun, lease: Lease,
        first: list[Out] | asyncio.Task[list[Out]], steps: AsyncIterator[list[Out]], tracker: Tracker,
        stack: contextlib.AsyncExitStack,
    ) -> AsyncGenerator[bytes, None]:  # fmt: skip
        status, error = 200, None
        try:
            yield b"".join(shape.first(model.id))
            if isinstance(first, asyncio.Task):
                while not (await asyncio.wait({first}, timeout=self.config.ping_interval_s))[0]:
                    yield _ping(shape.dialect)
                first = first.result()
                tracker.first_token()
            yield b"".join(shape.outs(first))
            async for outs in steps:
                if chunk := b"".join(shape.outs(outs)):
                    yield chunk
            yield b"".join(shape.last(run))
        except AppError as exc:
            failure = exc if isinstance(exc, ApiError) else from_app_error(exc, model.engine)
            status, error = failure.status_for(shape.dialect), failure.message
            yield shape.error(failure)
        except (asyncio.CancelledError, GeneratorExit):
            status, error = CLIENT_CLOSED, "the client closed the connection"
            raise
        except Exception as exc:
            log.exception("the API server failed while streaming")
            status, error = 500, f"{type(exc).__name__}: {exc}"
            yield shape.error(ApiError(500, "The server failed while streaming this reply; see its log."))
        finally:
            self._finish(tracker, run, lease, status, error)
            await stack.aclose()

    def _finish(
        self, tracker: Tracker, run: ReplyRun, lease: Lease, status: int = 200, error: str | None = None
    ) -> None:
        stats = run.stats
        engine_ttft = stats.ttft_ms if stats else None
        client_ttft = tracker.record.ttft_ms
        wait = max(0.0, client_ttft - engine_ttft) if client_ttft is not None and engine_ttft is not None else None
        tracker.finish(
            status, error,
            prompt_tokens=stats.prompt_tokens if stats else None,
            completion_tokens=stats.completion_tokens if stats else None,
            tokens_per_s=stats.decode_tokens_per_s if stats else None,
            finish_reason=run.finish_reason if status == 200 else None,
            wait_ms=wait, load_ms=lease.load_ms,
        )  # fmt: skip


_SERVER_SAMPLING = frozenset(
    {"temperature", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"}
)


def _ping(dialect: Dialect) -> bytes:
    """Keeps a waiting stream alive: Anthropic's ``ping`` event, an SSE comment (ignored by clients) for OpenAI."""
    return named_event("ping", {"type": "ping"}) if dialect is Dialect.ANTHROPIC else b": ping\n\n"


async def _cancelled(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def _parse(data: bytes) -> dict[str, Any]:
    return safe_json.loads_object(data, what="The request body", max_bytes=None)


def _keep_alive(body: dict[str, Any]) -> object:
    return Fields(body).keep_alive()


def _engine(tracker: Tracker) -> EngineKind | None:
    engine = tracker.record.engine
    return EngineKind(engine) if engine in EngineKind.__members__.values() else None


# --- the two dialects' shapes -------------------------------------------------------------------------------------
class _Shape(Protocol):
    dialect: Dialect

    def first(self, model: str) -> list[bytes]: ...
    def outs(self, outs: list[Out]) -> list[bytes]: ...
    def last(self, run: ReplyRun) -> list[bytes]: ...
    def error(self, error: ApiError) -> bytes: ...
    def whole(self, model: str, reply: CollectedReply, run: ReplyRun) -> dict[str, Any]: ...


class _OpenAIChat:
    dialect = Dialect.OPENAI

    def __init__(self, call: GenerationCall) -> None:
        self.call = call
        self.completion = call.prompt is not None
        self.chunks: openai_render.ChatChunks | None = None
        self.finished: set[int] = set()  # n > 1: the choices whose last chunk was sent

    def first(self, model: str) -> list[bytes]:
        self.chunks = openai_render.ChatChunks(model, self.call.include_usage, completion=self.completion)
        return [data_event(c) for i in range(self.call.n) for c in numbered(self.chunks.first(), i)]

    def outs(self, outs: list[Out]) -> list[bytes]:
        assert self.chunks is not None
        if not isinstance(outs, ChoiceOuts):
            return [data_event(c) for c in self.chunks.outs(outs)]
        ended = [c for i, reason in outs.ended for c in self._choice_end(i, reason)]
        return [data_event(c) for c in ended + numbered(self.chunks.outs(outs), outs.choice)]

    def last(self, run: ReplyRun) -> list[bytes]:
        assert self.chunks is not None
        if not isinstance(run, ChoiceRuns):
            return [data_event(c) for c in self.chunks.last(run.finish_reason, run.stats)] + [DONE]
        ends = [c for choice in run.choices if choice.index not in self.finished
                for c in self._choice_end(choice.index, choice.finish_reason)]  # fmt: skip
        usage = [c for c in self.chunks.last(run.finish_reason, run.stats) if not c["choices"]]
        return [data_event(c) for c in ends + usage] + [DONE]

    def _choice_end(self, index: int, finish_reason: str) -> list[dict[str, Any]]:
        """Choice ``index``'s last chunk (the usage chunk comes once, after every choice's)."""
        assert self.chunks is not None
        self.finished.add(index)
        return numbered([c for c in self.chunks.last(finish_reason, None) if c["choices"]], index)

    def error(self, error: ApiError) -> bytes:
        return data_event(error.body(Dialect.OPENAI))

    def whole(self, model: str, reply: CollectedReply, run: ReplyRun) -> dict[str, Any]:
        render = openai_render.text_completion if self.completion else openai_render.chat_completion
        want_logprobs = self.call.options.logprobs
        if not isinstance(run, ChoiceRuns):
            return render(model, reply, run.finish_reason, run.stats, want_logprobs=want_logprobs)
        bodies = [render(model, c.reply, c.finish_reason, c.stats, want_logprobs=want_logprobs) for c in run.choices]
        return one_body(bodies, run.stats)


class _AnthropicMessage:
    """Anthropic's message, whole or as events; ``message_start`` carries the prompt's size, counted in the
    request's turn before the reply starts (``ready``), where the engine can count it."""

    dialect = Dialect.ANTHROPIC

    def __init__(self, call: GenerationCall) -> None:
        self.call = call
        self.stops: tuple[str, ...] = tuple(call.sampling.get("stop") or ())
        self.input_tokens = 0
        self.events: anthropic_render.MessageEvents | None = None

    async def ready(self, lease: Lease) -> None:
        if not self.call.stream:
            return  # the whole message has the engine's own count
        try:
            self.input_tokens = await lease.turn.count_tokens(self.call.messages, self.call.options.tools)
        except AppError as exc:  # an engine that cannot count (Ollama): message_delta has the figure
            log.debug("message_start without the prompt's size: %s", exc)

    def first(self, model: str) -> list[bytes]:
        self.events = anthropic_render.MessageEvents(model, thinking=self.call.thinking, stops=self.stops)
        return [named_event(n, d) for n, d in self.events.first(self.input_tokens)]

    def outs(self, outs: list[Out]) -> list[bytes]:
        assert self.events is not None
        return [named_event(n, d) for n, d in self.events.outs(outs)]

    def last(self, run: ReplyRun) -> list[bytes]:
        assert self.events is not None
        return [named_event(n, d) for n, d in self.events.last(run.finish_reason, run.stats)]

    def error(self, error: ApiError) -> bytes:
        return named_event("error", error.body(Dialect.ANTHROPIC))

    def whole(self, model: str, reply: CollectedReply, run: ReplyRun) -> dict[str, Any]:
        return anthropic_render.message_body(model, reply, run.finish_reason, run.stats, thinking=self.call.thinking,
                                             stops=self.stops)  # fmt: skip
