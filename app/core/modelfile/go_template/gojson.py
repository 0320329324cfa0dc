"""encoding/json's Marshal of template values, and JSON objects with ``omitempty`` fields."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from app.core.modelfile.go_template.errors import FuncError
from app.core.modelfile.go_template.strconv import format_float, format_float_v
from app.core.modelfile.go_template.values import is_true, sorted_items, struct_fields


def json_string(s: str) -> str:
    out = ['"']
    for c in s:
        if c == '"' or c == "\\":
            out.append("\\" + c)
        elif c in "\n\r\t\b\f":
            out.append("\\" + "nrtbf"["\n\r\t\b\f".index(c)])
        elif ord(c) < 0x20 or c in "<>&\u2028\u2029":
            out.append(f"\\u{ord(c):04x}")
        elif 0xD800 <= ord(c) < 0xE000:  # not UTF-8
            out.append("\\ufffd")
        else:
            out.append(c)
    return "".join(out) + '"'


def _json_float(f: float) -> str:
    if math.isnan(f) or math.isinf(f):
        raise FuncError(f"json: unsupported value: {format_float_v(f)}")
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    text = format_float(f, -6, 21)
    return text.replace("e-0", "e-") if "e-0" in text else text


def marshal_json(v: Any) -> str:
    """encoding/json.Marshal: compact, HTML-safe escapes, map keys sorted, structs in field order."""
    marshal = getattr(v, "go_json", None)
    if callable(marshal):
        return str(marshal())
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _json_float(v)
    if isinstance(v, str):
        return json_string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(marshal_json(x) for x in v) + "]"
    if isinstance(v, dict):
        return (
            "{"
            + ",".join(
                f"{json_string(str(k))}:{marshal_json(x)}" for k, x in sorted_items({str(k): x for k, x in v.items()})
            )
            + "}"
        )
    fields = struct_fields(v)
    if fields is not None:
        return "{" + ",".join(f"{json_string(k)}:{marshal_json(x)}" for k, x in fields) + "}"
    return json_string(str(v))


def json_object(pairs: Iterable[tuple[str, Any, str]]) -> str:
    """A JSON object from (key, value, omit) in field order, like encoding/json with ``omitempty``: omit is "" (keep),
    "nil" (drop when nil: an ``any`` or pointer field) or "empty" (drop an empty string/slice/map, 0 or false)."""
    parts = []
    for key, value, omit in pairs:
        if (omit == "nil" and value is None) or (omit == "empty" and not is_true(value)):
            continue
        parts.append(f"{json_string(key)}:{marshal_json(value)}")
    return "{" + ",".join(parts) + "}"
