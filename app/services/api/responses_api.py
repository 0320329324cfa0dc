"""``/v1/responses``: create a response (plain or streamed) on the server's one generation path (``Api._serve`` and
``Api._generate``, with this API's shape), continue a stored one (``previous_response_id``), and retrieve, delete or
list the input items of a stored one. Errors are OpenAI's, with ``param``.

    POST   /v1/responses                          {"model", "instructions"?, "input", "tools"?, "text"?, "stream"?…}
    GET    /v1/responses/{id}                     the stored response object (404 when not stored)
    DELETE /v1/responses/{id}                     {"id", "object": "response", "deleted": true}
    GET    /v1/responses/{id}/input_items         {"object": "list", "data": [...], "first_id", "last_id", "has_more"}
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.services.api.errors import ApiError, Dialect, bad_request
from app.services.api.records import Tracker
from app.services.api.replies import CollectedReply, Out, ReplyRun
from app.services.api.responses_render import ResponseEvents, ResponseHead, output_items, status_of, usage
from app.services.api.responses_requests import ResponsesAsk, responses_ask
from app.services.api.responses_store import ResponseStore, StoredResponse, not_found
from app.services.api.routes import Api
from app.services.api.sse import named_event

ENDPOINT = "responses"
MAX_PAGE = 100


class ResponsesApi:
    def __init__(self, api: Api, store: ResponseStore) -> None:
        self.api = api
        self.store = store

    async def create(self, request: Request) -> Response:
        async def work(tracker: Tracker, body: dict[str, Any]) -> Response:
            ask = responses_ask(body, self.api.config.max_tokens_limit)
            history = await self.store.history(ask.previous_response_id) if ask.previous_response_id else []
            ask.call.messages = ask.messages(history)
            return await self.api._generate(request, tracker, ask.call, ResponseShape(ask, self.store))

        return await self.api._serve(request, Dialect.OPENAI, ENDPOINT, work)

    async def retrieve(self, request: Request) -> Response:
        async def work(tracker: Tracker, _body: Any) -> Response:
            if request.query_params.get("stream", "").lower() in ("true", "1"):
                raise bad_request("A stored response cannot be streamed again here: get it without 'stream'.",
                                  param="stream")  # fmt: skip
            stored = await self._stored(request)
            tracker.finish(200)
            return JSONResponse(stored.response)

        return await self.api._serve(request, Dialect.OPENAI, ENDPOINT, work, body=False)

    async def delete(self, request: Request) -> Response:
        async def work(tracker: Tracker, _body: Any) -> Response:
            response_id = request.path_params["response_id"]
            if not await self.store.delete(response_id):
                raise not_found(response_id)
            tracker.finish(200)
            return JSONResponse({"id": response_id, "object": "response", "deleted": True})

        return await self.api._serve(request, Dialect.OPENAI, ENDPOINT, work, body=False)

    async def input_items(self, request: Request) -> Response:
        async def work(tracker: Tracker, _body: Any) -> Response:
            stored = await self._stored(request)
            page = _page(stored.input, request.query_params)
            tracker.finish(200)
            return JSONResponse(page)

        return await self.api._serve(request, Dialect.OPENAI, ENDPOINT, work, body=False)

    async def _stored(self, request: Request) -> StoredResponse:
        response_id = request.path_params["response_id"]
        stored = await self.store.get(response_id)
        if stored is None:
            raise not_found(response_id)
        return stored


def _page(items: list[dict[str, Any]], query: Any) -> dict[str, Any]:
    """One page of a response's input items: ``order`` desc (the default, newest first) or asc, ``limit`` 1–100
    (20), ``after`` an item id."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise bad_request('\'order\' must be "asc" or "desc".', param="order")
    limit = query.get("limit", "20")
    if not limit.isdigit() or not 1 <= int(limit) <= MAX_PAGE:
        raise bad_request(f"'limit' must be a whole number from 1 to {MAX_PAGE}.", param="limit")
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after := query.get("after"):
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            raise bad_request(f"'after' names {after!r}, which is not one of this response's input items.",
                              param="after")  # fmt: skip
        start = ids.index(after) + 1
    data = ordered[start : start + int(limit)]
    return {
        "object": "list", "data": data, "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None, "has_more": start + len(data) < len(ordered),
    }  # fmt: skip


class ResponseShape:
    """The Responses API's shape of one reply (``Api._generate``'s ``_Shape``): the whole response object, or its
    stream of events; a finished response is stored when the request asked (``store``, by default)."""

    dialect = Dialect.OPENAI

    def __init__(self, ask: ResponsesAsk, store: ResponseStore) -> None:
        self.ask = ask
        self.store = store
        self.events: ResponseEvents | None = None

    def first(self, model: str) -> list[bytes]:
        self.events = ResponseEvents(ResponseHead(model, self.ask.echo, self.ask.logprobs, self.ask.tools))
        return [_sse(e) for e in self.events.first()]

    def outs(self, outs: list[Out]) -> list[bytes]:
        assert self.events is not None
        return [_sse(e) for e in self.events.outs(outs)]

    def last(self, run: ReplyRun) -> list[bytes]:
        assert self.events is not None
        events = self.events.last(run.finish_reason, run.stats, run.reader.thinking_tokens)
        self._keep(events[-1]["response"])
        return [_sse(e) for e in events]

    def error(self, error: ApiError) -> bytes:
        assert self.events is not None
        return _sse(self.events.failed(error))

    def whole(self, model: str, reply: CollectedReply, run: ReplyRun) -> dict[str, Any]:
        head = ResponseHead(model, self.ask.echo, self.ask.logprobs, self.ask.tools)
        status = status_of(run.finish_reason)
        output = output_items(reply, status, logprobs=self.ask.logprobs, tools=self.ask.tools)
        body = head.body(status, output, usage(run.stats, run.reader.thinking_tokens))
        self._keep(body)
        return body

    def _keep(self, body: dict[str, Any]) -> None:
        if self.ask.store:
            self.store.put(body, self.ask.items)


def _sse(event: dict[str, Any]) -> bytes:
    return named_event(event["type"], event)
