"""The Starlette application: the routes, 404/405 in the API's own error shapes, and CORS only when origins are
listed (a browser page on another origin cannot call the server otherwise)."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.services.api.responses_api import ResponsesApi
from app.services.api.responses_store import ResponseStore
from app.services.api.routes import Api


def build_app(api: Api) -> Starlette:
    routes = [
        Route("/health", api.health, methods=["GET"]),
        Route("/metrics", api.prometheus, methods=["GET"]),
        Route("/v1/models", api.list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", api.get_model, methods=["GET"]),
        Route("/v1/chat/completions", api.chat_completions, methods=["POST"]),
        Route("/v1/completions", api.completions, methods=["POST"]),
        Route("/v1/embeddings", api.embeddings, methods=["POST"]),
        Route("/v1/messages", api.messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", api.count_tokens, methods=["POST"]),
        *_responses_routes(api),
    ]
    middleware = []
    if api.config.cors_origins:
        middleware.append(Middleware(
            CORSMiddleware, allow_origins=list(api.config.cors_origins), allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["*"],
        ))  # fmt: skip

    async def http_error(request: Request, exc: Any) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return await api.not_found(request, 405 if status == 405 else 404)

    return Starlette(routes=routes, middleware=middleware, exception_handlers={HTTPException: http_error})


def _responses_routes(api: Api) -> list[Route]:
    """The Responses API, with its stored responses in the server's data folder (in memory without one)."""
    responses = ResponsesApi(api, ResponseStore(api.config.state_dir))
    return [
        Route("/v1/responses", responses.create, methods=["POST"]),
        Route("/v1/responses/{response_id}", responses.retrieve, methods=["GET"]),
        Route("/v1/responses/{response_id}", responses.delete, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", responses.input_items, methods=["GET"]),
    ]
