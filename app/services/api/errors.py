"""Errors as each API writes them: OpenAI's ``{"error": {"message", "type", "param", "code"}}`` and Anthropic's
``{"type": "error", "error": {"type", "message"}}``, with the status each uses. The app's error kinds map here once.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from app.core.errors import AppError, ErrorKind
from app.services.engines.entries import EngineKind


class Dialect(StrEnum):
    OPENAI = "openai"
    ANTHROPIC = "anthropic"


# Anthropic's error types by status (https://docs.anthropic.com/en/api/errors)
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
OVERLOADED_STATUS = {Dialect.OPENAI: 503, Dialect.ANTHROPIC: 529}


class ApiError(AppError):
    """A request that ends in an error response, with its HTTP status. ``overloaded``: the queue is full (OpenAI
    503, Anthropic 529)."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None,
        overloaded: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(message, kind=_kind_of(status, overloaded))
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.overloaded = overloaded

    def __str__(self) -> str:
        return self.message

    def status_for(self, dialect: Dialect) -> int:
        return OVERLOADED_STATUS[dialect] if self.overloaded else self.status

    def body(self, dialect: Dialect) -> dict[str, Any]:
        status = self.status_for(dialect)
        if dialect is Dialect.ANTHROPIC:
            kind = _ANTHROPIC_TYPES.get(status, "api_error")
            return {"type": "error", "error": {"type": kind, "message": self.message}}
        kind = "invalid_request_error" if status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


def _kind_of(status: int, overloaded: bool) -> ErrorKind:
    if overloaded:
        return ErrorKind.BUSY
    if status == 404:
        return ErrorKind.NOT_FOUND
    if status == 503:
        return ErrorKind.UNAVAILABLE
    return ErrorKind.INVALID_INPUT if status < 500 else ErrorKind.ENGINE_FAILED


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def overloaded(message: str) -> ApiError:
    return ApiError(503, message, code="overloaded", overloaded=True)


def from_app_error(error: AppError, engine: EngineKind | None = None) -> ApiError:
    """The response for an error the services raised: bad input 400, not found 404, busy 503/529, unavailable 503,
    an engine failure 500 (llama.cpp, in this app) or 502 (vLLM and Ollama: another server failed)."""
    message = str(error) or type(error).__name__
    kind = error.kind
    if kind is ErrorKind.INVALID_INPUT:
        return ApiError(400, message, code="invalid_request")
    if kind is ErrorKind.NOT_FOUND:
        return ApiError(404, message, code="not_found")
    if kind is ErrorKind.BUSY:
        return overloaded(message)
    if kind is ErrorKind.UNAVAILABLE:
        return ApiError(503, message, code="unavailable")
    upstream = engine in (EngineKind.OLLAMA, EngineKind.VLLM)
    return ApiError(502 if upstream else 500, message, code="engine_failed")
