"""Reading a request body's fields: each wrong type or out-of-range value is a 400 that names the field and says
what it must be. Fields the server does not know are ignored (clients send many), fields it cannot honour are
refused — never silently dropped."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from app.core.params import SamplingParams
from app.services.api.errors import ApiError, bad_request

UNSET = object()  # a request that said nothing about keep_alive

MAX_STOPS = 16
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass
class GenerationCall:
    """What a chat, completion or Messages request asks, engine-neutral. ``sampling``: the SamplingParams fields
    the request set (the model's saved settings fill the rest); ``prompt`` set: a raw text completion."""

    model: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    prompt: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    options: Any = None  # GenerationOptions
    stream: bool = False
    include_usage: bool = False
    keep_alive: object = UNSET
    thinking: bool = False  # Anthropic: the client asked to see the model's thinking
    n: int = 1  # OpenAI: choices to generate for the one prompt
    echo: bool = False  # /v1/completions: the prompt comes back before the completion (with its logprobs if asked)

    def sampling_params(self, defaults: SamplingParams, max_tokens_limit: int, n_ctx: int | None) -> SamplingParams:
        """The model's saved sampling with the request's fields over it. Without max_tokens the reply may run to
        the end of the context (the saved value is the chat window's reply length, not a bound an API client
        agreed to), but no further than the server's limit."""
        merged = {**defaults.to_dict(), **self.sampling}
        if "max_tokens" not in self.sampling:
            merged["max_tokens"] = None if n_ctx is not None and n_ctx <= max_tokens_limit else max_tokens_limit
        return SamplingParams.from_dict(merged)


class Fields:
    """Typed access to a JSON object's fields; every problem is an ApiError 400 naming the field."""

    def __init__(self, body: dict[str, Any], prefix: str = "") -> None:
        self.body = body
        self._prefix = prefix

    def name(self, key: str) -> str:
        return f"{self._prefix}{key}"

    def has(self, key: str) -> bool:
        return self.body.get(key) is not None

    def fail(self, key: str, must: str) -> ApiError:
        return bad_request(f"'{self.name(key)}' must be {must}.", param=self.name(key))

    def number(self, key: str, low: float, high: float) -> float | None:
        value = self.body.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(key, f"a number from {low:g} to {high:g}")
        if not low <= value <= high:
            raise self.fail(key, f"from {low:g} to {high:g}, not {value:g}")
        return float(value)

    def integer(self, key: str, low: int, high: int | None = None) -> int | None:
        value = self.body.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, "a whole number")
        if value < low or (high is not None and value > high):
            raise self.fail(key, f"from {low} to {high}" if high is not None else f"at least {low}")
        return value

    def boolean(self, key: str) -> bool | None:
        value = self.body.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self.fail(key, "true or false")
        return value

    def text(self, key: str, *, required: bool = False) -> str | None:
        value = self.body.get(key)
        if value is None:
            if required:
                raise bad_request(f"'{self.name(key)}' is required.", param=self.name(key))
            return None
        if not isinstance(value, str):
            raise self.fail(key, "a string")
        return value

    def obj(self, key: str) -> dict[str, Any] | None:
        value = self.body.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.fail(key, "an object")
        return value

    def stops(self, key: str) -> tuple[str, ...] | None:
        value = self.body.get(key)
        if value is None:
            return None
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
            raise self.fail(key, "a non-empty string or a list of them")
        if len(items) > MAX_STOPS:
            raise self.fail(key, f"at most {MAX_STOPS} sequences")
        return tuple(items)

    def max_tokens(self, keys: tuple[str, ...], limit: int) -> int | None:
        for key in keys:
            value = self.integer(key, 1)
            if value is not None:
                if value > limit:
                    raise bad_request(
                        f"'{self.name(key)}' is {value}, over this server's limit of {limit} tokens per request. "
                        "Ask for fewer.",
                        param=self.name(key), code="max_tokens_too_large",
                    )  # fmt: skip
                return value
        return None

    def refuse(self, key: str, why: str, *, unless: Any = None) -> None:
        """400 when ``key`` is set to anything but ``unless`` (or an empty value): the server cannot honour it."""
        value = self.body.get(key)
        if value is None or value == unless or value in ({}, [], "", False):
            return
        raise bad_request(f"'{self.name(key)}' is not supported here: {why}", param=self.name(key),
                          code="unsupported_parameter")  # fmt: skip

    def keep_alive(self) -> object:
        """``keep_alive`` (Ollama: seconds, or a duration such as "5m", "1h30m"; negative: keep loaded) or
        ``ttl`` (LM Studio: seconds); UNSET when neither is given."""
        if self.has("keep_alive"):
            return self._duration("keep_alive")
        ttl = self.integer("ttl", 0)
        return float(ttl) if ttl is not None else UNSET

    def _duration(self, key: str) -> float:
        value = self.body[key]
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        if isinstance(value, str):
            text = value.strip()
            sign = -1.0 if text.startswith("-") else 1.0
            body = text.lstrip("+-")
            try:
                return sign * float(body)
            except ValueError:
                pass
            parts = _DURATION_PART.findall(body)
            if parts and "".join(n + u for n, u in parts) == body:
                return sign * sum(float(n) * _UNITS_S[u] for n, u in parts)
        raise self.fail(key, 'seconds or a duration such as "5m", "1h" or "-1" (keep loaded)')


def sampling_fields(f: Fields, *, temperature_max: float = 2.0) -> dict[str, Any]:
    """The sampling fields OpenAI and Anthropic requests share (plus llama.cpp's top_k, min_p, repeat_penalty)."""
    found: dict[str, Any] = {}
    for key, low, high in (("temperature", 0.0, temperature_max), ("top_p", 0.0, 1.0), ("min_p", 0.0, 1.0),
                           ("typical_p", 0.0, 1.0), ("repeat_penalty", 0.0, 10.0),
                           ("presence_penalty", -2.0, 2.0), ("frequency_penalty", -2.0, 2.0)):  # fmt: skip
        if (value := f.number(key, low, high)) is not None:
            found[key] = value
    if (top_k := f.integer("top_k", 0)) is not None:
        found["top_k"] = top_k
    if (seed := f.integer("seed", -(2**63), 2**64 - 1)) is not None:
        found["seed"] = seed % 2**32  # llama.cpp's seeds are 32-bit
    return found
