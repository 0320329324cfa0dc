"""Template functions: Go's built-ins (text/template/funcs.go) and Ollama's FuncMap."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

from app.core.modelfile.go_template.errors import FuncError
from app.core.modelfile.go_template.gojson import marshal_json
from app.core.modelfile.go_template.ollama_types import ToolProperty
from app.core.modelfile.go_template.strconv import from_utf8, utf8
from app.core.modelfile.go_template.values import go_type, is_nil, is_true, sprint, sprint_value, sprintf, sprintln


@dataclass(frozen=True)
class Func:
    fn: Callable[..., Any]
    params: tuple[str, ...] = ()  # "any" or "string", one per fixed parameter
    variadic: str | None = None  # the type of the ... parameter


def _basic_kind(v: Any) -> str | None:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    return None


def _eq(a: Any, *others: Any) -> bool:
    if not others:
        raise FuncError("missing argument for comparison")
    k1 = _basic_kind(a)
    for b in others:
        k2 = _basic_kind(b)
        if k1 != k2:
            if a is not None and b is not None:
                raise FuncError("incompatible types for comparison")
            truth = False
        elif k1 is not None:
            truth = a == b
        elif is_nil(a) or is_nil(b):
            if a is not None and b is not None and go_type(a)[:2] != go_type(b)[:2]:
                raise FuncError(
                    f"non-comparable types {sprint_value(a)}: {go_type(a)}, {go_type(b)}: {sprint_value(b)}"
                )
            truth = is_nil(a) == is_nil(b)
        elif isinstance(b, (list, tuple, dict)) or isinstance(a, (list, tuple, dict)):
            raise FuncError(f"non-comparable type {sprint_value(b)}: {go_type(b)}")
        else:
            truth = a == b
        if truth:
            return True
    return False


def _ne(a: Any, b: Any) -> bool:
    return not _eq(a, b)


def _lt(a: Any, b: Any) -> bool:
    k1, k2 = _basic_kind(a), _basic_kind(b)
    if k1 is None or k2 is None:
        raise FuncError("invalid type for comparison")
    if k1 != k2:
        raise FuncError("incompatible types for comparison")
    if k1 == "bool":
        raise FuncError("invalid type for comparison")
    return bool(a < b)


def _le(a: Any, b: Any) -> bool:
    return _lt(a, b) or _eq(a, b)


def _gt(a: Any, b: Any) -> bool:
    return not _le(a, b)


def _ge(a: Any, b: Any) -> bool:
    return not _lt(a, b)


def _not(a: Any) -> bool:
    return not is_true(a)


def _len(v: Any) -> int:
    if v is None:
        raise FuncError("len of nil pointer")
    if isinstance(v, str):
        return len(utf8(v))
    if isinstance(v, (list, tuple, dict)):
        return len(v)
    raise FuncError(f"len of type {go_type(v)}")


def _index_arg(index: Any, cap: int) -> int:
    if index is None:
        raise FuncError("cannot index slice/array with nil")
    if isinstance(index, bool) or not isinstance(index, int):
        raise FuncError(f"cannot index slice/array with type {go_type(index)}")
    if index < 0 or index > cap:
        raise FuncError(f"index out of range: {index}")
    return index


def _index(item: Any, *indexes: Any) -> Any:
    if item is None:
        raise FuncError("index of untyped nil")
    for index in indexes:
        if item is None:
            raise FuncError("index of nil pointer")
        if isinstance(item, (str, list, tuple)):
            seq: Any = utf8(item) if isinstance(item, str) else item
            i = _index_arg(index, len(seq))
            if i >= len(seq):
                raise FuncError(f"index out of range: {i}")
            item = seq[i]
        elif isinstance(item, dict):
            key_types = {type(k) for k in item}
            if index is None:
                raise FuncError("value is nil; should be of type string")
            if key_types and type(index) not in key_types:
                raise FuncError(f"value has type {go_type(index)}; should be {go_type(next(iter(item)))}")
            item = item.get(index)
        else:
            raise FuncError(f"can't index item of type {go_type(item)}")
    return item


def _slice(item: Any, *indexes: Any) -> Any:
    if item is None:
        raise FuncError("slice of untyped nil")
    if len(indexes) > 3:
        raise FuncError(f"too many slice indexes: {len(indexes)}")
    if isinstance(item, str):
        if len(indexes) == 3:
            raise FuncError("cannot 3-index slice a string")
        seq: Any = utf8(item)
    elif isinstance(item, (list, tuple)):
        seq = item
    else:
        raise FuncError(f"can't slice item of type {go_type(item)}")
    idx = [0, len(seq), len(seq)]
    for i, index in enumerate(indexes):
        idx[i] = _index_arg(index, len(seq))
    if idx[0] > idx[1]:
        raise FuncError(f"invalid slice index: {idx[0]} > {idx[1]}")
    if len(indexes) == 3 and idx[1] > idx[2]:
        raise FuncError(f"invalid slice index: {idx[1]} > {idx[2]}")
    part = seq[idx[0] : idx[1]]
    return from_utf8(part) if isinstance(item, str) else list(part)


def _eval_args(args: Sequence[Any]) -> str:
    """The text html/js/urlquery escape: fmt.Sprint of the args, a nil one reading "<no value>"."""
    if len(args) == 1 and isinstance(args[0], str):
        return args[0]
    return sprint(["<no value>" if a is None else a for a in args])


def _html(*args: Any) -> str:
    s = _eval_args(args)
    table = {"\0": "\ufffd", '"': "&#34;", "'": "&#39;", "&": "&amp;", "<": "&lt;", ">": "&gt;"}
    return "".join(table.get(c, c) for c in s)


def _js(*args: Any) -> str:
    out = []
    table = {"\\": "\\\\", "'": "\\'", '"': '\\"', "<": "\\u003C", ">": "\\u003E", "&": "\\u0026", "=": "\\u003D"}
    for c in _eval_args(args):
        if c in table:
            out.append(table[c])
        elif ord(c) < 0x20 or (ord(c) >= 0x80 and not c.isprintable()):
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return "".join(out)


def _urlquery(*args: Any) -> str:
    return quote_plus(_eval_args(args), safe="")


def _call(fn: Any, *args: Any) -> Any:
    if fn is None:
        raise FuncError("call of nil")
    if not callable(fn):
        raise FuncError(f"non-function of type {go_type(fn)}")
    return fn(*args)


def _json(v: Any) -> str:
    try:
        return marshal_json(v)
    except FuncError:
        return ""  # Ollama ignores json.Marshal's error


def _to_typescript_type(v: Any) -> str:
    return v.to_typescript_type() if isinstance(v, ToolProperty) else "any"


BUILTINS: dict[str, Func] = {
    "and": Func(lambda *a: None, ("any",), "any"),  # evaluated lazily by the executor
    "or": Func(lambda *a: None, ("any",), "any"),
    "not": Func(_not, ("any",)),
    "eq": Func(_eq, ("any",), "any"),
    "ne": Func(_ne, ("any", "any")),
    "lt": Func(_lt, ("any", "any")),
    "le": Func(_le, ("any", "any")),
    "gt": Func(_gt, ("any", "any")),
    "ge": Func(_ge, ("any", "any")),
    "len": Func(_len, ("any",)),
    "index": Func(_index, ("any",), "any"),
    "slice": Func(_slice, ("any",), "any"),
    "print": Func(lambda *a: sprint(a), (), "any"),
    "printf": Func(lambda f, *a: sprintf(f, a), ("string",), "any"),
    "println": Func(lambda *a: sprintln(a), (), "any"),
    "html": Func(_html, (), "any"),
    "js": Func(_js, (), "any"),
    "urlquery": Func(_urlquery, (), "any"),
    "call": Func(_call, ("any",), "any"),
}


def _ollama_funcs(today: _dt.date | None) -> dict[str, Func]:
    """Ollama's FuncMap (template/template.go): json, currentDate, yesterdayDate, toTypeScriptType."""

    def current(*_format: str) -> str:  # the format argument is accepted and ignored, as in Ollama
        return (today or _dt.date.today()).isoformat()

    def yesterday(*_format: str) -> str:
        return ((today or _dt.date.today()) - _dt.timedelta(days=1)).isoformat()

    return {
        "json": Func(_json, ("any",)),
        "currentDate": Func(current, (), "string"),
        "yesterdayDate": Func(yesterday, (), "string"),
        "toTypeScriptType": Func(_to_typescript_type, ("any",)),
    }


def all_funcs(today: _dt.date | None, extra: Mapping[str, Callable[..., Any]] | None = None) -> dict[str, Func]:
    funcs = {**BUILTINS, **_ollama_funcs(today)}
    for name, fn in (extra or {}).items():
        funcs[name] = Func(fn, (), "any")
    return funcs
