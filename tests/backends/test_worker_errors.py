"""The llama.cpp worker never dies of a bad request: hostile or broken chat templates, unknown chat formats,
contexts that cannot fit and malformed protocol lines each give a clear error, and the SAME worker process then
answers the next request. Real worker, real llama-cpp-python, GGUFs from tests/support/gguf_factory.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from app.backends.llamacpp.backend import LlamaCppBackend, LoadRefusedError
from app.backends.llamacpp.process import worker_command
from app.backends.protocol import GenerationError, ModelLoadError, StateKind
from app.core.errors import InvalidInputError
from app.core.memory.fit import MachineMemory
from app.core.params import LoadParams, SamplingParams
from tests.support.gguf_factory import CHATML_TEMPLATE, write_tiny_gguf

HI = [{"role": "user", "content": "hi"}]
SHORT = SamplingParams(max_tokens=4, seed=1, temperature=0.0)
GIB = 1 << 30

# The sandbox refuses attributes that start with an underscore: printing one raises SecurityError at render.
BLOCKED_TEMPLATE = "{{ ''.__class__.__mro__[1].__subclasses__() }}" + CHATML_TEMPLATE
# Blocked only for conversations of three messages or more: it passes the load's check, fails at chat.
BLOCKED_LATER_TEMPLATE = "{% if messages|length > 2 %}{{ ''.__class__.__mro__ }}{% endif %}" + CHATML_TEMPLATE
# Line 2 closes an expression with one brace.
SYNTAX_ERROR_TEMPLATE = "{% for message in messages %}\n{{ message['content'] }\n{% endfor %}"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


@pytest.fixture(scope="module")
def template_ggufs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("templates")
    return {
        name: write_tiny_gguf(folder / f"{name}.gguf", chat_template=template, name=name)
        for name, template in (
            ("blocked", BLOCKED_TEMPLATE),
            ("blocked-later", BLOCKED_LATER_TEMPLATE),
            ("syntax-error", SYNTAX_ERROR_TEMPLATE),
        )
    }


async def _reply(backend, messages=HI):
    return "".join([d.text async for d in backend.stream_chat(messages, SHORT)])


async def _refused_then_next(path, good, params=None):
    """Load ``path`` (expected to fail), then load ``good`` and chat in the same worker."""
    backend = LlamaCppBackend()
    try:
        await backend.load(str(good), LoadParams(n_ctx=256))  # start the worker with a model loaded
        pid = backend.worker_pid
        with pytest.raises(ModelLoadError) as caught:
            await backend.load(str(path), params or LoadParams(n_ctx=256))
        after_refusal = (backend.worker_pid, backend.model is not None, backend.state.kind)
        kept_reply = await _reply(backend)  # the model loaded before the refused load still answers
        await backend.load(str(good), LoadParams(n_ctx=256))
        return caught.value, pid, after_refusal, kept_reply, await _reply(backend), backend.worker_pid
    finally:
        await backend.close()


def test_sandbox_blocked_template_is_named_and_the_worker_answers_next(template_ggufs, tiny_gguf):
    error, pid, (pid_after, kept, state), kept_reply, reply, last_pid = run(
        _refused_then_next(template_ggufs["blocked"], tiny_gguf)
    )
    message = str(error)
    assert isinstance(error, LoadRefusedError) and isinstance(error, InvalidInputError)
    assert "chat template tried an unsafe operation" in message and "sandbox blocked" in message
    assert "__class__" in message  # the real cause, from jinja2's SecurityError
    assert "choose another chat format" in message and "replace the template" in message
    assert pid_after == pid == last_pid and pid is not None  # never restarted: the worker survived
    assert kept and state is StateKind.READY and kept_reply and reply


def test_template_syntax_error_names_its_line_and_the_worker_answers_next(template_ggufs, tiny_gguf):
    error, pid, (pid_after, kept, _state), _kept_reply, reply, last_pid = run(
        _refused_then_next(template_ggufs["syntax-error"], tiny_gguf)
    )
    message = str(error)
    assert "chat template has a syntax error at line 2: unexpected '}'" in message
    assert "choose another chat format" in message
    assert pid_after == pid == last_pid and kept and reply


def test_a_broken_template_does_not_block_another_chat_format(template_ggufs):
    """llama-cpp-python compiles every template in the GGUF at load; asking for chatml must still work."""

    async def scenario():
        backend = LlamaCppBackend()
        try:
            info = await backend.load(str(template_ggufs["syntax-error"]), LoadParams(n_ctx=256, chat_format="chatml"))
            return info, await _reply(backend)
        finally:
            await backend.close()

    info, reply = run(scenario())
    assert info.chat_format == "chatml" and "asked for" in info.chat_format_reason and reply


def test_template_blocked_at_chat_time_fails_that_reply_only(template_ggufs):
    three = [*HI, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and?"}]

    async def scenario():
        backend = LlamaCppBackend()
        try:
            await backend.load(str(template_ggufs["blocked-later"]), LoadParams(n_ctx=256))
            pid = backend.worker_pid
            with pytest.raises(GenerationError) as caught:
                await _reply(backend, three)
            state = backend.state.kind
            return caught.value, state, await _reply(backend), (pid, backend.worker_pid)
        finally:
            await backend.close()

    error, state, reply, (pid, pid_after) = run(scenario())
    assert "tried an unsafe operation" in str(error) and "choose another chat format" in str(error)
    assert state is StateKind.READY and reply and pid == pid_after


def test_unknown_chat_format_names_the_valid_ones_and_keeps_the_model(tiny_gguf):
    error, pid, (pid_after, kept, _state), _kept, reply, _last = run(
        _refused_then_next(tiny_gguf, tiny_gguf, LoadParams(n_ctx=256, chat_format="chatmlx"))
    )
    message = str(error)
    assert isinstance(error, LoadRefusedError)
    assert message.startswith("Unknown chat format 'chatmlx'. Did you mean 'chatml'?")
    assert "Valid formats:" in message and "llama-3" in message and "chat_template.default" in message
    assert "settings" not in message
    assert pid_after == pid and kept and reply


def test_context_that_cannot_fit_is_refused_before_the_worker_starts(tiny_gguf):
    small = MachineMemory((), (), (), 8 * GIB, 4 * GIB, "No NVIDIA GPU found.")

    async def scenario():
        backend = LlamaCppBackend(machine_memory=lambda: small)
        try:
            with pytest.raises(LoadRefusedError) as caught:
                await backend.load(str(tiny_gguf), LoadParams(n_ctx=999_999_999))
            return caught.value, backend.worker_pid, backend.state.kind
        finally:
            await backend.close()

    error, pid, state = run(scenario())
    message = str(error)
    assert "context of 999,999,999 tokens will not fit" in message
    assert "KV cache alone needs 238.4 GiB" in message and "of 4.0 GiB system RAM" in message
    assert "Lower the context to" in message
    assert pid is None and state is StateKind.STOPPED  # refused from the estimate: no worker was started


def test_worker_refuses_a_context_beyond_ram_itself(tiny_gguf):
    """Without a memory reader (bench, tests) the worker still refuses what RAM cannot hold, at once."""

    async def scenario():
        backend = LlamaCppBackend()
        try:
            await backend.load(str(tiny_gguf), LoadParams(n_ctx=256))
            pid = backend.worker_pid
            with pytest.raises(LoadRefusedError) as caught:
                await backend.load(str(tiny_gguf), LoadParams(n_ctx=999_999_999))
            return caught.value, pid == backend.worker_pid, await _reply(backend)
        finally:
            await backend.close()

    error, same_worker, reply = run(scenario())
    assert "will not fit in this machine's memory" in str(error) and "GiB" in str(error)
    assert same_worker and reply


# --- the raw protocol: lines no app would send ------------------------------------------------------------------


class RawWorker:
    """The worker process spoken to in raw bytes."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        self.proc = subprocess.Popen(
            worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        assert self.read()["event"] == "hello"

    def write(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def send(self, message: dict) -> None:
        self.write(json.dumps(message).encode())

    def read(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the worker exited ({self.proc.poll()}): {self.proc.stderr.read().decode()[-2000:]}"
        return json.loads(line)

    def until(self, request_id: int) -> dict:
        """The final event (done, loaded, error, unloaded) for ``request_id``."""
        while (event := self.read())["event"] == "delta" or event.get("id") != request_id:
            pass
        return event

    def close(self) -> int:
        self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture
def raw_worker():
    worker = RawWorker()
    yield worker
    worker.close()


def test_nested_json_and_malformed_commands_get_errors_and_the_worker_lives(raw_worker, tiny_gguf):
    for line in (b"[" * 100_000 + b"]" * 100_000, b'{"op": "load", "path": ' + b"[" * 50_000, b"\xff\xfe{", b"[1, 2]"):
        raw_worker.write(line)
        event = raw_worker.read()
        assert event["event"] == "error" and event["kind"] == "bad_command" and event["id"] is None
    assert "nested too deeply" in _first_error(raw_worker, b"[" * 100_000)
    raw_worker.send({"op": "load", "id": 1, "path": str(tiny_gguf), "params": {"n_ctx": 256}})
    assert raw_worker.until(1)["event"] == "loaded"
    raw_worker.send({"op": "chat", "id": 2, "messages": HI, "sampling": {"max_tokens": 3}})
    done = raw_worker.until(2)
    assert done["event"] == "done" and done["completion_tokens"] >= 1
    assert raw_worker.close() == 0


def _first_error(worker: RawWorker, line: bytes) -> str:
    worker.write(line)
    return worker.read()["message"]


def test_unexpected_exceptions_become_error_events_with_the_cause(raw_worker, tiny_gguf):
    raw_worker.send({"op": "load", "id": 1})  # no path: a KeyError inside the worker
    error = raw_worker.until(1)
    assert error["event"] == "error" and error["kind"] == "load" and "KeyError" in error["message"]
    raw_worker.send({"op": "load", "id": 2, "path": str(tiny_gguf), "params": {"n_ctx": 256}})
    assert raw_worker.until(2)["event"] == "loaded"
    raw_worker.send({"op": "chat", "id": 3, "messages": "not a list of messages"})
    error = raw_worker.until(3)
    assert error["event"] == "error" and error["kind"] == "bad_command"
    assert "a list of objects, each with a role" in error["message"]
    raw_worker.send({"op": "chat", "id": 4, "messages": HI, "sampling": {"max_tokens": "three"}})
    error = raw_worker.until(4)  # a TypeError deep in llama-cpp-python
    assert error["event"] == "error" and error["kind"] == "generation" and "TypeError" in error["message"]
    assert error["loaded"] is True
    raw_worker.send({"op": "chat", "id": 5, "messages": HI, "sampling": {"max_tokens": 3}})
    assert raw_worker.until(5)["event"] == "done"
    assert raw_worker.close() == 0


def test_a_failed_context_is_not_blamed_on_the_architecture():
    """What llama.cpp says when a context cannot be created (a GPU build whose VRAM it exceeds, for one)."""
    from app.backends.llamacpp.engine import _load_failure_message

    message = _load_failure_message("/m/x.gguf", "llama", 999_999_999, ValueError("Failed to create llama_context"))
    assert "could not create a context of 999,999,999 tokens" in message and "Lower the context size" in message
    assert "architecture" not in message
    assert "architecture 'llama'" in _load_failure_message("/m/x.gguf", "llama", 4096, ValueError("Failed to load"))
