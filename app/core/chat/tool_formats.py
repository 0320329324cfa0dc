"""What models' replies look like: their tool-call formats, their thinking tags, and which ones a model uses.

The reply parser (``reply_parser``) finds where a call starts; the scanners here read one call from that point
on, incrementally, and decode it. A scanner is handed the call's growing text (``raw``: the opening tag, when
there is one, and everything after it) and answers ``None`` (not decided yet: more text needed) or a
``CallScan``: ``raw[:end]`` was the call (or a failed attempt, which stays content) and ``raw[end:]`` is the
text after it.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from app.core import safe_json


class ReplyFormat(StrEnum):
    """How a model writes tool calls in its reply text."""

    HERMES = "hermes"  # Qwen2.5/Qwen3, Hermes: <tool_call>{"name": …, "arguments": {…}}</tool_call>, one per call
    LLAMA3_JSON = "llama3_json"  # Llama 3.1/3.2: {"name": …, "parameters": {…}}, alone or after <|python_tag|>
    MISTRAL = "mistral"  # [TOOL_CALLS][{"name": …, "arguments": {…}}, …]  or  [TOOL_CALLS]name[ARGS]{…}
    NONE = "none"  # no tool calls: thinking and content only


@dataclass(frozen=True)
class ThinkTags:
    open: str
    close: str


THINK_TAGS = ThinkTags("<think>", "</think>")  # DeepSeek-R1, QwQ, Qwen3, GLM
MISTRAL_THINK_TAGS = ThinkTags("[THINK]", "[/THINK]")  # Magistral
KIMI_THINK_TAGS = ThinkTags("◁think▷", "◁/think▷")  # Kimi-VL thinking
SEED_THINK_TAGS = ThinkTags("<seed:think>", "</seed:think>")  # ByteDance Seed-OSS
THINKING_TAGS = ThinkTags("<thinking>", "</thinking>")  # some fine-tunes (e.g. Reflection)
THINK_VARIANTS = (MISTRAL_THINK_TAGS, KIMI_THINK_TAGS, SEED_THINK_TAGS, THINKING_TAGS, THINK_TAGS)


@dataclass(frozen=True)
class ReplyConfig:
    """How to read one model's replies.

    ``think``: the thinking tags (None: the model does not think; a block is only recognised at the very start of
    a reply). ``prompt_opens_think``: the chat template already wrote the opening tag into the prompt, so the reply
    starts inside the thinking block and only its closing tag shows. Pass ``ReplyFormat.NONE`` as ``tools`` when a
    request offered no tools: a reply then never becomes a call.
    """

    tools: ReplyFormat = ReplyFormat.NONE
    think: ThinkTags | None = THINK_TAGS
    prompt_opens_think: bool = False


HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
MISTRAL_CALLS, MISTRAL_ARGS, MISTRAL_CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"

# The tag that starts a call inside content, and the first characters of a reply that may be a call without one
# (engines that drop special tokens from the text lose <|python_tag|> and [TOOL_CALLS]).
CALL_TAGS: dict[ReplyFormat, tuple[str, ...]] = {
    ReplyFormat.HERMES: (HERMES_OPEN,),
    ReplyFormat.LLAMA3_JSON: (PYTHON_TAG,),
    ReplyFormat.MISTRAL: (MISTRAL_CALLS,),
    ReplyFormat.NONE: (),
}
BARE_CALL_STARTS: dict[ReplyFormat, str] = {ReplyFormat.LLAMA3_JSON: "{[", ReplyFormat.MISTRAL: "["}

_TOOL_MARKERS = (
    (ReplyFormat.HERMES, ("<tool_call>",)),
    (ReplyFormat.MISTRAL, ("[TOOL_CALLS]",)),
    (ReplyFormat.LLAMA3_JSON, ("<|python_tag|>", "respond with a json for a function call")),
)
_ARCH_FORMATS = (("qwen", ReplyFormat.HERMES), ("mistral", ReplyFormat.MISTRAL))
# From ``add_generation_prompt`` to the end of its branch: what the template writes after the last turn.
_GENERATION_PROMPT = re.compile(r"add_generation_prompt(.*?)\{%-?\s*(?:endif|else|elif)\b", re.S)


def reply_format_for(chat_template: str | None, architecture: str | None = None) -> ReplyConfig:
    """How to read the replies of a model with this chat template (or, without one, this architecture)."""
    template = chat_template or ""
    lowered = template.lower()
    tools = next((fmt for fmt, marks in _TOOL_MARKERS if any(m.lower() in lowered for m in marks)), None)
    if tools is None:
        arch = (architecture or "").lower() if not template else ""
        tools = next((fmt for prefix, fmt in _ARCH_FORMATS if arch and arch.startswith(prefix)), ReplyFormat.NONE)
    if not template:
        return ReplyConfig(tools, THINK_TAGS)
    think = next((t for t in THINK_VARIANTS if t.open in template or t.close in template), None)
    return ReplyConfig(tools, think, think is not None and _prompt_opens_think(template, think))


def _prompt_opens_think(template: str, tags: ThinkTags) -> bool:
    """True where the generation prompt writes the opening tag without closing it (QwQ, DeepSeek-R1, Qwen3-2507
    thinking); Qwen3's ``<think>\\n\\n</think>`` for thinking switched off opens nothing."""
    return any(tags.open in m[1] and tags.close not in m[1] for m in _GENERATION_PROMPT.finditer(template))


_ALNUM = string.ascii_letters + string.digits


def random_call_ids(fmt: ReplyFormat) -> Callable[[int], str]:
    """Fresh ids for calls the model gave none: Mistral's templates insist on 9 letters or digits."""
    if fmt is ReplyFormat.MISTRAL:
        return lambda _index: "".join(secrets.choice(_ALNUM) for _ in range(9))
    return lambda _index: "call_" + "".join(secrets.choice(_ALNUM) for _ in range(24))


@dataclass(frozen=True)
class RawCall:
    name: str
    arguments_json: str
    id: str | None = None  # the model's own id, where its format has one


@dataclass(frozen=True)
class CallScan:
    end: int
    calls: tuple[RawCall, ...] = ()
    error: str | None = None  # why raw[:end] is not a call; None with no calls: plain text that only looked like one


class CallScanner(Protocol):
    def advance(self, raw: str, final: bool) -> CallScan | None: ...


class CallFormatError(ValueError):
    """A call that was written wrongly; the message says how."""


_JSON_SPECIAL = re.compile(r'[\\"{}\[\]]')


class JsonExtent:
    """Where one JSON object or array that starts at ``start`` ends, read from a growing text without rescanning."""

    def __init__(self, start: int) -> None:
        self._pos, self._depth, self._in_string, self._escaped_at = start, 0, False, -1

    def end(self, text: str) -> int | None:
        for match in _JSON_SPECIAL.finditer(text, self._pos):
            at, char = match.start(), match[0]
            if at == self._escaped_at:
                continue
            if self._in_string:
                if char == "\\":
                    self._escaped_at = at + 1
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth <= 0:
                    self._pos = at + 1
                    return at + 1
        self._pos = len(text)
        return None


def _skip_space(raw: str, at: int) -> int:
    while at < len(raw) and raw[at].isspace():
        at += 1
    return at


_CALL_LIKE = re.compile(r'\s*\[?\s*\{\s*"name"\s*:')


def _decode_calls(text: str, arg_keys: tuple[str, ...]) -> tuple[RawCall, ...]:
    value = _loads(text, "the tool call")
    items = value if isinstance(value, list) else [value]
    if not items:
        raise CallFormatError("the list of tool calls is empty")
    return tuple(_call_from(item, arg_keys) for item in items)


def _loads(text: str, what: str) -> Any:
    try:
        return safe_json.loads(text, what=what)
    except safe_json.JsonError as exc:
        raise CallFormatError(str(exc)) from None


def _call_from(obj: object, arg_keys: tuple[str, ...]) -> RawCall:
    if not isinstance(obj, dict):
        raise CallFormatError('a tool call must be a JSON object with a "name" and its arguments')
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CallFormatError('the tool call has no "name"')
    name = name.strip()
    args = next((obj[key] for key in arg_keys if key in obj), None)
    return RawCall(name, _arguments_json(name, args), _given_id(obj.get("id")))


def _arguments_json(name: str, args: object) -> str:
    if args is None:
        args = {}
    if isinstance(args, str):  # some models write the arguments as a JSON string, as OpenAI's API does
        args = _loads(args, f"the arguments of '{name}'")
    if not isinstance(args, dict):
        raise CallFormatError(f"the arguments of '{name}' are not a JSON object")
    return json.dumps(args, ensure_ascii=False)


def _given_id(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _json_calls(
    raw: str, start: int, stop: int, arg_keys: tuple[str, ...], tagged: bool, end: int | None = None
) -> CallScan:
    """Decode the JSON in raw[start:stop] (the scan ends at ``end``, by default ``stop``); a failure is an error
    only if the text was meant as a call."""
    end = stop if end is None else end
    try:
        return CallScan(end, _decode_calls(raw[start:stop], arg_keys))
    except CallFormatError as exc:
        return CallScan(end, error=str(exc) if tagged or _CALL_LIKE.match(raw, start) else None)


class HermesScanner:
    """``<tool_call>{…}</tool_call>``: one call per tag pair. A call whose closing tag is missing (the reply ended,
    or the next ``<tool_call>`` began) is still a call if its JSON is complete."""

    _ARG_KEYS = ("arguments", "parameters")

    def __init__(self) -> None:
        self._searched = len(HERMES_OPEN)

    def advance(self, raw: str, final: bool) -> CallScan | None:
        start = len(HERMES_OPEN)
        close, reopen = (
            raw.find(tag, max(start, self._searched - len(tag) + 1)) for tag in (HERMES_CLOSE, HERMES_OPEN)
        )
        if close >= 0 and (reopen < 0 or close < reopen):
            return _json_calls(raw, start, close, self._ARG_KEYS, True, end=close + len(HERMES_CLOSE))
        if reopen >= 0:
            return self._unclosed(raw, reopen, f"the next {HERMES_OPEN} began before {HERMES_CLOSE}")
        self._searched = len(raw)
        if not final:
            return None
        return self._unclosed(raw, len(raw), f"the reply ended inside a tool call, before {HERMES_CLOSE}")

    def _unclosed(self, raw: str, end: int, why: str) -> CallScan:
        scan = _json_calls(raw, len(HERMES_OPEN), end, self._ARG_KEYS, True)
        return scan if scan.calls else CallScan(end, error=f"{why}: {scan.error}")


class _JsonCallScanner:
    """A JSON call (object, or list of objects) after an optional tag: Llama 3's and Mistral's list form."""

    def __init__(self, tag: str | None, arg_keys: tuple[str, ...]) -> None:
        self._tag, self._arg_keys = tag, arg_keys
        self._start: int | None = None
        self._extent: JsonExtent | None = None

    def advance(self, raw: str, final: bool) -> CallScan | None:
        if self._extent is None:
            opened = self._open(raw, final)
            if opened is not None:
                return opened
            if self._extent is None:
                return None
        assert self._start is not None
        end = self._extent.end(raw)
        if end is not None:
            return _json_calls(raw, self._start, end, self._arg_keys, self._tag is not None)
        if not final:
            return None
        meant = self._tag is not None or _CALL_LIKE.match(raw, self._start)
        return CallScan(len(raw), error="the reply ended before the tool call's JSON was complete" if meant else None)

    def _open(self, raw: str, final: bool) -> CallScan | None:
        """Find the opening bracket: a CallScan where there is none (not a call), None otherwise."""
        start = _skip_space(raw, len(self._tag or ""))
        if start >= len(raw):
            return self._not_json(len(raw)) if final else None
        if raw[start] not in "[{":
            return self._not_json(start)
        if raw[start] == "[":  # a list of calls: its first item must be an object
            first = _skip_space(raw, start + 1)
            if first >= len(raw):
                return self._not_json(len(raw)) if final else None
            if raw[first] != "{":
                return self._not_json(first)
        self._start, self._extent = start, JsonExtent(start)
        return None

    def _not_json(self, end: int) -> CallScan:
        error = f"the text after {self._tag} is not a JSON tool call" if self._tag else None
        return CallScan(max(end, 1), error=error)


def llama3_scanner(tag: str | None) -> CallScanner:
    return _JsonCallScanner(tag, ("parameters", "arguments"))


_WORD_END = re.compile(r"[^\w.\-]")
_MAX_NAME = 256


class MistralScanner:
    """After ``[TOOL_CALLS]``: a JSON list of calls (v3 tokenizer) or ``name[ARGS]{…}`` (v11; ``[CALL_ID]id``
    between them in v7). Parallel calls in the newer form repeat the tag, so each tag reads one call."""

    _ARG_KEYS = ("arguments", "parameters")

    def __init__(self, tag: str | None) -> None:
        self._tag = tag
        self._json: _JsonCallScanner | None = None
        self._name: str | None = None
        self._call_id: str | None = None
        self._args: JsonExtent | None = None
        self._args_start = 0

    def advance(self, raw: str, final: bool) -> CallScan | None:
        if self._json is None and self._name is None:
            start = _skip_space(raw, len(self._tag or ""))
            if start >= len(raw):
                return self._fail(len(raw), "nothing follows it") if final else None
            if raw[start] in "[{" or self._tag is None:
                self._json = _JsonCallScanner(self._tag, self._ARG_KEYS)
            else:
                return self._read_name(raw, start, final)
        if self._json is not None:
            return self._json.advance(raw, final)
        return self._read_args(raw, final)

    def _read_name(self, raw: str, start: int, final: bool) -> CallScan | None:
        word = _read_word(raw, start, final)
        if word is None:
            return None
        name, at = word
        if not name:
            return self._fail(at, "there is no function name after it")
        if raw.startswith(MISTRAL_CALL_ID, at):
            word = _read_word(raw, at + len(MISTRAL_CALL_ID), final)
            if word is None:
                return None
            self._call_id, at = word[0] or None, word[1]
        if raw.startswith(MISTRAL_ARGS, at):
            self._name, self._args_start = name, at + len(MISTRAL_ARGS)
            return self._read_args(raw, final)
        if not final and any(tag.startswith(raw[at:]) for tag in (MISTRAL_ARGS, MISTRAL_CALL_ID)):
            return None  # the tag is still arriving
        return self._fail(at, f"the function name '{name}' is not followed by {MISTRAL_ARGS}")

    def _read_args(self, raw: str, final: bool) -> CallScan | None:
        if self._args is None:
            start = _skip_space(raw, self._args_start)
            if start >= len(raw):
                return self._fail(len(raw), f"no arguments follow {MISTRAL_ARGS}") if final else None
            if raw[start] != "{":
                return self._fail(start, f"the arguments after {MISTRAL_ARGS} are not a JSON object")
            self._args_start, self._args = start, JsonExtent(start)
        end = self._args.end(raw)
        if end is None:
            return self._fail(len(raw), "the reply ended before the call's arguments were complete") if final else None
        assert self._name is not None
        try:
            args = _arguments_json(self._name, _loads(raw[self._args_start : end], f"the arguments of '{self._name}'"))
        except CallFormatError as exc:
            return CallScan(end, error=str(exc))
        return CallScan(end, (RawCall(self._name, args, self._call_id),))

    def _fail(self, end: int, why: str) -> CallScan:
        return CallScan(max(end, 1), error=f"{MISTRAL_CALLS} is not a tool call here: {why}")


def _read_word(raw: str, start: int, final: bool) -> tuple[str, int] | None:
    """A function name or call id from ``start``: the word and where it ends; None while it may still grow."""
    match = _WORD_END.search(raw, start, start + _MAX_NAME + 1)
    if match is None:
        if not final and len(raw) - start <= _MAX_NAME:
            return None
        at = min(len(raw), start + _MAX_NAME)
        return raw[start:at], at
    return raw[start : match.start()], match.start()


def call_scanner(fmt: ReplyFormat, tag: str | None) -> CallScanner:
    """The scanner for a call of ``fmt`` that starts with ``tag`` (None: a bare JSON call at a reply's start)."""
    if fmt is ReplyFormat.HERMES:
        return HermesScanner()
    if fmt is ReplyFormat.LLAMA3_JSON:
        return llama3_scanner(tag)
    if fmt is ReplyFormat.MISTRAL:
        return MistralScanner(tag)
    raise ValueError(f"{fmt} has no tool calls")
