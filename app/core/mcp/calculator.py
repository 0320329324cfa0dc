"""Arithmetic without ``eval``: the expression is parsed with :mod:`ast` and only numbers, ``+ - * / // % **``,
unary signs and parentheses are evaluated; its length, its size and the size of every number are bounded."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from app.core.errors import InvalidInputError

MAX_EXPRESSION_CHARS = 500
MAX_NODES = 200
MAX_EXPONENT = 10_000
MAX_INT_BITS = 4096  # about 1,233 decimal digits

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_ALLOWED = "only numbers, + - * / // % **, unary minus and parentheses are allowed"


class CalculatorError(InvalidInputError):
    """An expression the calculator will not evaluate; the message says why."""


def evaluate(expression: str) -> Number:
    """The value of ``expression``; a ``CalculatorError`` for anything but bounded arithmetic."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError):
        raise CalculatorError(f"not an arithmetic expression: {expression.strip()[:80]!r}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalculatorError(f"the expression has more than {MAX_NODES} parts")
    try:
        value = _value(tree.body)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the result is too large") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    return value


def format_number(value: Number) -> str:
    """``value`` as text: an integral float without its ``.0`` only when that is exact."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def _value(node: ast.expr) -> Number:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _value(node.operand)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        function = _BINARY.get(type(node.op))
        if function is not None:
            return _bounded(function(left, right))
    raise CalculatorError(f"{_ALLOWED}; found {_describe(node)}")


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponents are limited to ±{MAX_EXPONENT:,}")
    whole = isinstance(base, int) and isinstance(exponent, int) and exponent > 0
    if whole and max(abs(int(base)).bit_length() - 1, 0) * exponent > MAX_INT_BITS:  # before it is computed
        raise CalculatorError(f"the result would have more than {MAX_INT_BITS:,} bits")
    result = base**exponent
    if isinstance(result, complex):
        raise CalculatorError("the result is not a real number (a fractional power of a negative number)")
    return _bounded(result)


def _bounded(value: Number) -> Number:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalculatorError(f"numbers are limited to {MAX_INT_BITS:,} bits")
    return value


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        return "a function call"
    if isinstance(node, ast.Name):
        return f"the name {node.id!r}"
    if isinstance(node, ast.Attribute):
        return "an attribute"
    if isinstance(node, ast.Constant):
        return f"a {type(node.value).__name__} constant"
    return f"a {type(node).__name__} expression"
