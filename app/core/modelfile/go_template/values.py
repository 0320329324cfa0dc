"""Go values: truth, type names and fmt's printing (Print, Sprint, Sprintln, Sprintf)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from app.core.modelfile.go_template.strconv import format_float_v, go_quote, utf8


def is_nil(v: Any) -> bool:
    return v is None or bool(getattr(v, "go_nil", False))


def is_true(v: Any) -> bool:
    """Go's truth: false, 0, nil and empty strings, slices and maps are false; structs are true."""
    if v is None:
        return False
    if isinstance(v, (bool, int, float, str, list, tuple, dict)):
        return bool(v)
    return not is_nil(v)


def go_type(v: Any) -> str:
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    name = getattr(v, "go_type", None)
    if isinstance(name, str):
        return name
    if isinstance(v, (list, tuple)):
        return "[]interface {}"
    if isinstance(v, dict):
        return "map[string]interface {}"
    return type(v).__name__


def sorted_items(d: Mapping[Any, Any]) -> list[tuple[Any, Any]]:
    try:
        keys = sorted(d)
    except TypeError:
        keys = sorted(d, key=lambda k: (type(k).__name__, str(k)))
    return [(k, d[k]) for k in keys]


def struct_fields(v: Any) -> list[tuple[str, Any]] | None:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return [(f.name, getattr(v, f.name)) for f in dataclasses.fields(v)]
    return None


def sprint_value(v: Any, depth: int = 0) -> str:
    """fmt.Sprint of one value (%v): how Go prints a value inside a template action or through print."""
    return _format_value(v, "v", "", None, None, depth)


def _pad(text: str, width: int | None, flags: str, numeric: bool) -> str:
    if width is None or len(text) >= width:
        return text
    if "-" in flags:
        return text.ljust(width)
    if "0" in flags:
        sign = text[0] if numeric and text[:1] in "+- " else ""
        return sign + text[len(sign) :].rjust(width - len(sign), "0")
    return text.rjust(width)


def _format_scalar(v: Any, verb: str, flags: str, prec: int | None) -> str | None:
    """A bool, number or string under one fmt verb; None when the verb does not apply (Go's %!verb(…))."""
    if isinstance(v, bool):
        return ("true" if v else "false") if verb in "tv" else None
    sign = "+" if "+" in flags and verb != "v" else " " if " " in flags else ""  # %+v: "+" means field names
    if isinstance(v, int):
        sign = sign if v >= 0 else "-"
        if verb in "dv":
            return sign + str(abs(v))
        if verb in "boxXO":
            prefix = "0o" if verb == "O" else {"b": "0b", "o": "0", "x": "0x", "X": "0X"}[verb] if "#" in flags else ""
            return sign + prefix + format(abs(v), verb.lower() if verb == "O" else verb)
        if verb == "c":
            return chr(v) if 0 <= v <= 0x10FFFF else "\ufffd"
        if verb == "q":
            return "'" + go_quote(chr(v))[1:-1].replace('\\"', '"').replace("'", "\\'") + "'"
        if verb == "U":
            return f"U+{v:04X}"
        return None
    if isinstance(v, float):
        sign = sign if v >= 0 else ""
        if verb in "eEfF":
            return sign + format(v, f".{6 if prec is None else prec}{verb}")
        if verb in "gGv":
            text = format_float_v(v) if prec is None else format(v, f".{prec}g")
            return sign + (text.upper() if verb == "G" else text)
        return None
    if isinstance(v, str):
        v = v if prec is None else v[:prec]
        if verb == "s" or (verb == "v" and "#" not in flags):
            return v
        if verb == "q" or verb == "v":
            return "`" + v + "`" if "#" in flags and verb == "q" and "`" not in v else go_quote(v)
        if verb in "xX":
            return utf8(v).hex() if verb == "x" else utf8(v).hex().upper()
        return None
    return str(v) if verb == "v" else None


def _format_value(v: Any, verb: str, flags: str, width: int | None, prec: int | None, depth: int = 0) -> str:
    """fmt's printing of one operand under a verb (v, s, d, q, …), with width and precision: slices, maps and
    structs are formatted element by element, as Go does."""
    if v is None:
        return _pad("<nil>", width, flags, False) if verb in "vT" or depth > 0 else f"%!{verb}(<nil>)"
    if verb == "T":
        return _pad(go_type(v), width, flags, False)
    go_string = getattr(v, "go_string", None)
    if callable(go_string) and verb in "vsqxX":
        return _format_value(str(go_string()), verb, flags, width, prec, depth)

    def element(x: Any) -> str:
        return _format_value(x, verb, flags, width, prec, depth + 1)

    if isinstance(v, (list, tuple)):
        return "[" + " ".join(element(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{element(k)}:{element(x)}" for k, x in sorted_items(v)) + "]"
    fields = struct_fields(v)
    if fields is not None:
        prefix = "&" if depth == 0 and getattr(v, "go_pointer", False) else ""
        return prefix + "{" + " ".join(element(x) for _, x in fields) + "}"
    text = _format_scalar(v, verb, flags, prec)
    if text is None:
        return f"%!{verb}({go_type(v)}={_format_value(v, 'v', flags, width, prec, depth)})"
    return _pad(text, width, flags, isinstance(v, (int, float)) and not isinstance(v, bool))


def print_value(v: Any) -> str:
    """What {{ pipeline }} writes: like fmt.Print, but a nil or missing value prints "<no value>"."""
    return "<no value>" if v is None else sprint_value(v)


def sprint(args: Sequence[Any]) -> str:
    """fmt.Sprint: spaces between operands when neither is a string."""
    out: list[str] = []
    prev_string = False
    for i, a in enumerate(args):
        is_string = isinstance(a, str)
        if i > 0 and not is_string and not prev_string:
            out.append(" ")
        out.append(sprint_value(a))
        prev_string = is_string
    return "".join(out)


def sprintln(args: Sequence[Any]) -> str:
    return " ".join(sprint_value(a) for a in args) + "\n"


def sprintf(fmt: str, args: Sequence[Any]) -> str:
    """fmt.Sprintf for the common verbs (%v %s %d %q %t %f %e %g %x %c %T %%), flags, width and precision."""
    out: list[str] = []
    i, n, arg_i = 0, len(fmt), 0

    def take_number() -> int | None:
        nonlocal i, arg_i
        if i < n and fmt[i] == "*":
            i += 1
            if arg_i < len(args) and isinstance(args[arg_i], int):
                arg_i += 1
                return int(args[arg_i - 1])
            return None
        start = i
        while i < n and fmt[i].isdigit():
            i += 1
        return int(fmt[start:i]) if i > start else None

    while i < n:
        j = fmt.find("%", i)
        if j < 0:
            out.append(fmt[i:])
            break
        out.append(fmt[i:j])
        i = j + 1
        flags = ""
        while i < n and fmt[i] in "-+# 0":
            flags += fmt[i]
            i += 1
        width = take_number()
        prec = None
        if i < n and fmt[i] == ".":
            i += 1
            prec = take_number() or 0
        if i >= n:
            out.append("%!(NOVERB)")
            break
        verb = fmt[i]
        i += 1
        if verb == "%":
            out.append("%")
            continue
        if arg_i >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        out.append(_format_value(args[arg_i], verb, flags, width, prec))
        arg_i += 1
    if arg_i < len(args):
        extra = ", ".join("<nil>" if a is None else f"{go_type(a)}={sprint_value(a)}" for a in args[arg_i:])
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)
