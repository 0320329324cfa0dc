"""One vocabulary for errors: every service error carries a kind that the CLI maps to an exit code and the API
server to an HTTP status. Messages are neutral: they name no command-line flag and no widget."""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    NOT_FOUND = "not_found"
    INVALID_INPUT = "invalid_input"
    BUSY = "busy"
    UNAVAILABLE = "unavailable"
    ENGINE_FAILED = "engine_failed"


class AppError(Exception):
    """Base of the app's errors; ``kind`` says what sort of failure it is (a class attribute, or per instance).

    ``setting`` names, in neutral words, the setting that fixes it (``"api_key"``, ``"endpoint"``, ``"output"``),
    when one does: the message says what to do in words, the CLI names its option, a page can point at its field.
    """

    kind: ErrorKind = ErrorKind.ENGINE_FAILED
    setting: str | None = None

    def __init__(self, message: str = "", *, kind: ErrorKind | None = None, setting: str | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind
        if setting is not None:
            self.setting = setting


class InvalidInputError(AppError, ValueError):
    """Bad input from a user, a file or a server: the caller can fix it."""

    kind = ErrorKind.INVALID_INPUT


class NotFoundError(AppError, LookupError):
    kind = ErrorKind.NOT_FOUND


class BusyError(AppError):
    kind = ErrorKind.BUSY


class UnavailableError(AppError):
    """A server, library or device is not there or not reachable."""

    kind = ErrorKind.UNAVAILABLE


class EngineFailedError(AppError):
    kind = ErrorKind.ENGINE_FAILED
