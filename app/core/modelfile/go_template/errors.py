"""Errors: TemplateError, what callers see, and FuncError, what a template function raises."""

from __future__ import annotations

from app.core.errors import InvalidInputError


class TemplateError(InvalidInputError):
    """A template that does not parse or fails while executing; says where (line/column and the action)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None, context: str = "") -> None:
        self.message = message
        self.line = line
        self.column = column
        self.context = context
        where = f"line {line}, column {column}: " if line is not None else ""
        at = f"at <{context}>: " if context else ""
        super().__init__(f"template: {where}{at}{message}")


class FuncError(Exception):
    """An error returned by a template function; reported as "error calling NAME: …"."""


def line_col(src: str, pos: int) -> tuple[int, int]:
    line = src.count("\n", 0, pos) + 1
    return line, pos - (src.rfind("\n", 0, pos) + 1) + 1
