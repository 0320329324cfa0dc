"""A fake vLLM server for tests: real HTTP on 127.0.0.1, vLLM's OpenAI-compatible API as vLLM answers it.

Routes: ``GET /health``, ``GET /version``, ``GET /v1/models``, ``POST /v1/chat/completions``,
``POST /v1/completions`` (``stream`` true or false; SSE ``data: {...}`` events ending with ``data: [DONE]``;
``stream_options.include_usage`` adds a final usage chunk) and ``GET /metrics`` (the page in
``tests/data/vllm_metrics.txt`` with the running/waiting/KV gauges and the token counters made live).

Replies are deterministic: ``You said: <last user message>`` split into words, one word per token; with
``ignore_eos`` the reply goes on with filler words drawn from ``random.Random(seed)`` up to ``max_tokens``.
``stop`` strings cut the reply as vLLM does (the stop string is not included). Prompt tokens are counted as
the words of every message plus 4 per message (the chat template's overhead).

    with FakeOpenAIServer(models=("tiny",), api_key="k") as fake:
        fake.token_delay_s = 0.02            # slow streams so concurrency can be observed
        fake.fail("/v1/chat/completions", error="engine died", after=3)   # an error event mid-stream
        ...                                  # talk to fake.base_url
        assert fake.max_in_flight >= 8
        assert fake.requests_to("/v1/chat/completions")[0].json["temperature"] == 0.2
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.fake_http import Abort, FakeServer, Fault, RecordedRequest, TrackedHandler

METRICS_FIXTURE = Path(__file__).parents[1] / "data" / "vllm_metrics.txt"
VERSION = "0.33.0"
FILLER = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa")
TEMPLATE_TOKENS_PER_MESSAGE = 4


def echo_tokens(prompt: str) -> list[str]:
    """The default reply: ``You said: <prompt>`` as word tokens (a leading space on all but the first)."""
    words = f"You said: {prompt}".split()
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def error_body(message: str, error_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    """vLLM's ErrorResponse (0.10+): ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


class FakeOpenAIServer(FakeServer):
    """A vLLM OpenAI server on a free local port. Use as a context manager, or start()/stop().

    Knobs (plain attributes, change them any time): ``loading`` (``/health`` and ``/v1/*`` answer 503),
    ``token_delay_s`` (seconds before each token), ``reply`` (prompt text → tokens), ``max_model_len``,
    ``metrics_page`` (the ``/metrics`` template text), ``api_key`` (``/v1/*`` then needs ``Bearer <key>``).
    Read back: ``requests``, ``in_flight``, ``max_in_flight``, ``disconnects`` (request ids the client
    closed early) and the ``disconnected`` event, ``finished`` (request id → finish reason).
    """

    def __init__(
        self, models: tuple[str, ...] = ("tiny-llama",), *, api_key: str | None = None, max_model_len: int = 4096
    ) -> None:
        super().__init__()
        self.models = list(models)
        self.api_key = api_key
        self.max_model_len = max_model_len
        self.loading = False
        self.token_delay_s = 0.0
        self.overlap = 0  # >1: streams hold their tokens until that many generations have run at once (30 s at most)
        self.reply: Callable[[str], list[str]] = echo_tokens
        self.metrics_page = METRICS_FIXTURE.read_text(encoding="utf-8")
        self.finished: dict[str, str] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.prompt_tokens_served = 0
        self.generation_tokens_served = 0
        self._active_tokens: dict[str, int] = {}  # request id -> tokens in its KV cache now
        self._faults: dict[str, list[Fault]] = {}
        self._ids = itertools.count(1)
        self._changed = threading.Condition(self._lock)
        # Tools, as vLLM started with --enable-auto-tool-choice answers them: a chat with ``tools`` and
        # tool_choice "required" or a named function (or "auto" when ``auto_calls``) streams one call of that
        # function (the first tool for "required"/"auto") with ``tool_arguments``; ``tool_parser=False`` answers
        # a tool choice of "auto" with vLLM's 400. A request with ``logprobs`` gets a logprob per token.
        self.tool_arguments: dict[str, Any] = {}
        self.auto_calls = False
        self.tool_parser = True

    # --- test set-up and read-back ---------------------------------------------------------------------
    def fail(
        self,
        route: str,
        *,
        status: int = 400,
        error: str = "an error was encountered while running the model",
        error_type: str = "BadRequestError",
        after: int | None = None,
        die: bool = False,
    ) -> None:
        """Queue a fault for the next request on ``route`` (see ``Fault``); several queue up in order."""
        self._faults.setdefault(route, []).append(Fault(error, die, after, status, error_type))

    def wait_in_flight(self, count: int, timeout_s: float = 5.0) -> bool:
        """Block until at least ``count`` generations are in flight at once (True) or the timeout passes."""
        with self._changed:
            return self._changed.wait_for(lambda: self.in_flight >= count, timeout_s)

    def wait_idle(self, timeout_s: float = 5.0) -> bool:
        """Block until no generation is in flight (the server noticed every disconnect)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.in_flight == 0, timeout_s)

    def metrics_text(self) -> str:
        """The ``/metrics`` page now: the template with live gauges and counters, labelled with the first model."""
        with self._lock:
            blocks, block_size = _cache_config(self.metrics_page)
            used = sum(math.ceil(t / block_size) for t in self._active_tokens.values()) if block_size else 0
            live = {
                "vllm:num_requests_running": lambda _: float(self.in_flight),
                "vllm:num_requests_waiting": lambda _: 0.0,
                "vllm:kv_cache_usage_perc": lambda _: used / blocks if blocks else 0.0,
                "vllm:prompt_tokens_total": lambda v: v + self.prompt_tokens_served,
                "vllm:generation_tokens_total": lambda v: v + self.generation_tokens_served,
            }
            page = _rewrite(self.metrics_page, live)
        served = self.models[0] if self.models else ""
        return re.sub(r'model_name="[^"]*"', f'model_name="{served}"', page)

    # --- used by the handler ---------------------------------------------------------------------------
    def _take_fault(self, route: str) -> Fault | None:
        with self._lock:
            queue = self._faults.get(route)
            return queue.pop(0) if queue else None

    def _begin(self, request_id: str, prompt_tokens: int) -> None:
        with self._changed:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._active_tokens[request_id] = prompt_tokens
            self.prompt_tokens_served += prompt_tokens
            self._changed.notify_all()

    def _token(self, request_id: str) -> None:
        with self._lock:
            self._active_tokens[request_id] = self._active_tokens.get(request_id, 0) + 1
            self.generation_tokens_served += 1

    def _end(self, request_id: str, finish: str) -> None:
        with self._changed:
            self.in_flight -= 1
            self._active_tokens.pop(request_id, None)
            self.finished[request_id] = finish
            self._changed.notify_all()


def _cache_config(page: str) -> tuple[int, int]:
    """``num_gpu_blocks`` and ``block_size`` from the page's ``vllm:cache_config_info`` labels (0 when absent)."""
    match = re.search(r"^vllm:cache_config_info\{(.*)\}", page, re.MULTILINE)
    labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1))) if match else {}
    values = []
    for key in ("num_gpu_blocks", "block_size"):
        text = labels.get(key, "")
        values.append(int(text) if text.isdigit() else 0)
    return values[0], values[1]


def _rewrite(page: str, live: dict[str, Callable[[float], float]]) -> str:
    """Replace the value of every sample whose name is in ``live`` by ``live[name](old value)``."""

    def replace(match: re.Match[str]) -> str:
        value = live[match.group(1)](float(match.group(3)))
        return f"{match.group(1)}{match.group(2) or ''} {value!r}"

    names = "|".join(re.escape(name) for name in live)
    return re.sub(rf"^({names})(\{{[^}}]*\}})? (\S+)$", replace, page, flags=re.MULTILINE)


@dataclass
class _Plan:
    """What one generation request will produce."""

    request_id: str
    model: str
    prompt_tokens: int
    tokens: list[str]
    finish_reason: str
    stop_reason: str | None
    counted_tokens: int  # completion tokens in usage (the token that held a stop string counts)
    tool_call: tuple[str, str] | None = None  # (function name, arguments as JSON text)


class _Handler(TrackedHandler):
    @property
    def fake(self) -> FakeOpenAIServer:
        return self.server.fake

    # --- plumbing --------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        record = RecordedRequest(method, path, dict(self.headers.items()), body)
        self.fake._record(record)
        if self.answer_raw(path):
            return
        route = _ROUTES.get((method, path))
        if route is None:
            return self._json(404, {"detail": "Not Found"})
        if path.startswith("/v1/") and not self._authorized():
            return self._json(401, {"error": "Unauthorized"})
        if self.fake.loading and path != "/metrics":
            return self._json(503, error_body("The model is still loading.", "ServiceUnavailableError", 503))
        if body is None or not isinstance(body, dict):
            return self._json(400, error_body("The request body is not valid JSON.", "BadRequestError", 400))
        try:
            route(self, body, record)
        except Abort:
            self.close_connection = True

    def _authorized(self) -> bool:
        key = self.fake.api_key
        return key is None or self.headers.get("Authorization", "") == f"Bearer {key}"

    # --- simple routes ---------------------------------------------------------------------------------
    def _health(self, body: Any, record: RecordedRequest) -> None:
        self._send(200, b"")

    def _version(self, body: Any, record: RecordedRequest) -> None:
        self._json(200, {"version": VERSION})

    def _models(self, body: Any, record: RecordedRequest) -> None:
        created = int(time.time())
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": f"/models/{name}",
             "parent": None, "max_model_len": self.fake.max_model_len, "permission": []}
            for name in self.fake.models
        ]  # fmt: skip
        self._json(200, {"object": "list", "data": data})

    def _metrics(self, body: Any, record: RecordedRequest) -> None:
        self._send(200, self.fake.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")

    # --- generation ------------------------------------------------------------------------------------
    def _chat(self, body: dict[str, Any], record: RecordedRequest) -> None:
        messages = body.get("messages") or []
        if not isinstance(messages, list) or not messages:
            return self._json(400, error_body("messages must be a non-empty list", "BadRequestError", 400))
        last = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
        prompt_tokens = sum(len(str(m.get("content") or "").split()) + TEMPLATE_TOKENS_PER_MESSAGE for m in messages)
        self._generate(body, record, last, prompt_tokens, chat=True)

    def _completion(self, body: dict[str, Any], record: RecordedRequest) -> None:
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            prompt = " ".join(str(p) for p in prompt)
        if not isinstance(prompt, str):
            return self._json(400, error_body("prompt must be a string", "BadRequestError", 400))
        self._generate(body, record, prompt, max(1, len(prompt.split())), chat=False)

    def _generate(
        self, body: dict[str, Any], record: RecordedRequest, text: str, prompt_tokens: int, chat: bool
    ) -> None:
        fake = self.fake
        model = body.get("model") or ""
        if model not in fake.models:
            message = f"The model `{model}` does not exist."
            return self._json(404, error_body(message, "NotFoundError", 404, "model"))
        fault = fake._take_fault(record.path)
        if fault is not None and fault.after is None:
            return self._json(fault.status, error_body(fault.error, fault.error_type, fault.status))
        plan, problem = self._plan(body, model, text, prompt_tokens, chat)
        if plan is not None and chat:
            plan, problem = self._plan_tool_call(plan, body)
        if plan is None:
            return self._json(400, error_body(problem, "BadRequestError", 400))
        record.request_id = plan.request_id
        fake._begin(plan.request_id, prompt_tokens)
        finish = "abort"
        try:
            if body.get("stream"):
                self._stream(plan, body, chat, fault)
            else:
                self._whole(plan, chat)
            finish = plan.finish_reason
        finally:
            fake._end(plan.request_id, finish)

    def _plan(
        self, body: dict[str, Any], model: str, text: str, prompt_tokens: int, chat: bool
    ) -> tuple[_Plan | None, str]:
        fake = self.fake
        room = fake.max_model_len - prompt_tokens
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if max_tokens is None:
            max_tokens = room
        if max_tokens > room:
            return None, (
                f"This model's maximum context length is {fake.max_model_len} tokens. However, you requested "
                f"{max_tokens + prompt_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
                "completion). Please reduce the length of the messages or completion."
            )
        tokens = list(fake.reply(text))
        if body.get("ignore_eos"):
            rng = random.Random(body.get("seed") or 0)
            tokens += [" " + rng.choice(FILLER) for _ in range(max(0, max_tokens - len(tokens)))]
        finish = "length" if len(tokens) >= max_tokens else "stop"
        tokens = tokens[:max_tokens]
        stops = body.get("stop") or []
        tokens, counted, stop_reason = _cut_at_stop(tokens, [stops] if isinstance(stops, str) else list(stops))
        if stop_reason is not None:
            finish = "stop"
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-{next(fake._ids)}"
        return _Plan(request_id, model, prompt_tokens, tokens, finish, stop_reason, counted), ""

    def _plan_tool_call(self, plan: _Plan, body: dict[str, Any]) -> tuple[_Plan | None, str]:
        tools, choice = body.get("tools") or [], body.get("tool_choice", "auto")
        if not tools or choice == "none":
            return plan, ""
        if choice == "auto" and not self.fake.tool_parser:
            return None, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        if not (choice == "required" or isinstance(choice, dict) or self.fake.auto_calls):
            return plan, ""
        name = choice["function"]["name"] if isinstance(choice, dict) else tools[0]["function"]["name"]
        plan.tool_call = (name, json.dumps(self.fake.tool_arguments))
        plan.tokens, plan.finish_reason, plan.counted_tokens = [], "tool_calls", 1
        return plan, ""

    def _wait_token(self, plan: _Plan) -> None:
        fake = self.fake
        if fake.overlap > 1:
            with fake._changed:
                fake._changed.wait_for(lambda: fake.max_in_flight >= fake.overlap, 30)
        delay = self.fake.token_delay_s
        if delay and self.fake._stopping.wait(delay):
            raise Abort
        if self._client_gone():
            self.fake._note_disconnect(plan.request_id)
            raise Abort
        self.fake._token(plan.request_id)

    def _whole(self, plan: _Plan, chat: bool) -> None:
        for _ in plan.tokens:
            self._wait_token(plan)
        text = "".join(plan.tokens)
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": plan.finish_reason,
                                  "stop_reason": plan.stop_reason}  # fmt: skip
        if chat:
            calls = [_tool_call(plan, plan.tool_call[1])] if plan.tool_call else []
            choice["message"] = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": calls}
        else:
            choice["text"] = text
        obj = "chat.completion" if chat else "text_completion"
        self._json(200, {**_head(plan, obj), "choices": [choice], "usage": _usage(plan)})

    def _stream(self, plan: _Plan, body: dict[str, Any], chat: bool, fault: Fault | None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        obj = "chat.completion.chunk" if chat else "text_completion"
        if chat:
            self._event(plan, {**_head(plan, obj), "choices": [_chunk_choice(chat, "", role=True)]})
        if plan.tool_call is not None:
            self._stream_tool_call(plan, obj)
        for index, token in enumerate(plan.tokens):
            if fault is not None and fault.after is not None and index >= fault.after:
                return self._fail_stream(plan, fault)
            self._wait_token(plan)
            last = index == len(plan.tokens) - 1
            choice = _chunk_choice(chat, token, finish=plan if last else None)
            if body.get("logprobs"):
                choice["logprobs"] = _logprobs(chat, token, body)
            self._event(plan, {**_head(plan, obj), "choices": [choice]})
        if fault is not None and fault.after is not None:
            return self._fail_stream(plan, fault)
        if not plan.tokens:
            self._event(plan, {**_head(plan, obj), "choices": [_chunk_choice(chat, "", finish=plan)]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event(plan, {**_head(plan, obj), "choices": [], "usage": _usage(plan)})
        self._event(plan, "[DONE]")
        self._write_chunk(plan, b"")

    def _stream_tool_call(self, plan: _Plan, obj: str) -> None:
        """The call as vLLM streams it: the name with empty arguments, then the arguments in two pieces."""
        assert plan.tool_call is not None
        arguments = plan.tool_call[1]
        half = len(arguments) // 2
        for piece in ("", arguments[:half], arguments[half:]):
            self._wait_token(plan)
            call = _tool_call(plan, piece) if piece == "" else {"index": 0, "function": {"arguments": piece}}
            choice = {"index": 0, "logprobs": None, "finish_reason": None, "delta": {"tool_calls": [call]}}
            self._event(plan, {**_head(plan, obj), "choices": [choice]})

    def _fail_stream(self, plan: _Plan, fault: Fault) -> None:
        if fault.die:
            self._die()
        self._event(plan, error_body(fault.error, fault.error_type, fault.status))
        self._event(plan, "[DONE]")
        self._write_chunk(plan, b"")
        plan.finish_reason = "error"

    def _event(self, plan: _Plan, data: dict[str, Any] | str) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        self._write_chunk(plan, f"data: {text}\n\n".encode())

    def _write_chunk(self, plan: _Plan, data: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except OSError:
            self.fake._note_disconnect(plan.request_id)
            raise Abort from None


def _cut_at_stop(tokens: list[str], stops: list[str]) -> tuple[list[str], int, str | None]:
    """Cut ``tokens`` before the first stop string: (kept tokens, tokens generated, the stop string or None)."""
    text = ""
    for index, token in enumerate(tokens):
        candidate = text + token
        found = [(candidate.find(s, max(0, len(text) - len(s) + 1)), s) for s in stops if s]
        found = [(pos, s) for pos, s in found if pos >= 0]
        if found:
            pos, stop = min(found)
            kept = tokens[:index]
            if pos > len(text):
                kept.append(candidate[len(text) : pos])
            elif pos < len(text):  # the stop string began in earlier tokens: trim them
                joined = "".join(kept)[:pos]
                kept = [joined] if joined else []
            return kept, index + 1, stop
        text = candidate
    return tokens, len(tokens), None


def _head(plan: _Plan, obj: str) -> dict[str, Any]:
    return {"id": plan.request_id, "object": obj, "created": int(time.time()), "model": plan.model}


def _chunk_choice(chat: bool, text: str, *, role: bool = False, finish: _Plan | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish.finish_reason if finish else None}
    if chat:
        choice["delta"] = {"role": "assistant", "content": text} if role else {"content": text}
    else:
        choice["text"] = text
    if finish is not None:
        choice["stop_reason"] = finish.stop_reason
    return choice


def _tool_call(plan: _Plan, arguments: str) -> dict[str, Any]:
    assert plan.tool_call is not None
    return {"index": 0, "id": f"chatcmpl-tool-{plan.request_id}", "type": "function",
            "function": {"name": plan.tool_call[0], "arguments": arguments}}  # fmt: skip


def _logprobs(chat: bool, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """A logprob for ``token`` (-0.5) with alternatives, in the chat's or the completion's shape."""
    top = int((body.get("top_logprobs") if chat else body.get("logprobs")) or 0)
    alternatives = [(token, -0.5)] + [(f"alt{i}", -2.0 - i) for i in range(top - 1)]
    if not chat:
        return {"tokens": [token], "token_logprobs": [-0.5], "top_logprobs": [dict(alternatives[:top])],
                "text_offset": [0]}  # fmt: skip
    entry = {"token": token, "logprob": -0.5, "bytes": list(token.encode())}
    top_entries = [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in alternatives[:top]]
    return {"content": [{**entry, "top_logprobs": top_entries}]}


def _usage(plan: _Plan) -> dict[str, int]:
    return {
        "prompt_tokens": plan.prompt_tokens,
        "total_tokens": plan.prompt_tokens + plan.counted_tokens,
        "completion_tokens": plan.counted_tokens,
    }


_ROUTES: dict[tuple[str, str], Callable[[_Handler, Any, RecordedRequest], None]] = {
    ("GET", "/health"): _Handler._health,
    ("GET", "/version"): _Handler._version,
    ("GET", "/v1/models"): _Handler._models,
    ("GET", "/metrics"): _Handler._metrics,
    ("POST", "/v1/chat/completions"): _Handler._chat,
    ("POST", "/v1/completions"): _Handler._completion,
}


def iter_sse(lines: Iterator[str]) -> Iterator[dict[str, Any] | str]:
    """Decode SSE ``data:`` lines (for tests reading the fake directly): JSON objects, then ``"[DONE]"``."""
    for line in lines:
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            yield payload if payload == "[DONE]" else json.loads(payload)


FakeOpenAIServer.handler_class = _Handler
