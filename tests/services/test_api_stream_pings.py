"""A streamed reply whose first token is slow (a long prompt on a slow machine: Claude Code's ~20k tokens) starts
without it — its opening events, then pings — so a client that gives up on a silent connection keeps waiting. The
fake vLLM holds every stream's tokens until two generate at once: the first token cannot come before the test
sends the second request, which it does only after it has read the pings."""

from __future__ import annotations

import json
import threading

import pytest

from app.services.api.config import ServerConfig
from app.services.engines.events import VllmEndpoint
from tests.support.api_harness import ApiHarness
from tests.support.fake_openai import FakeOpenAIServer

HI = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def vllm():
    with FakeOpenAIServer(models=("tiny-llama",)) as fake:
        yield fake


@pytest.fixture(scope="module")
def api(vllm):
    config = ServerConfig(port=0, first_token_grace_s=0.0, ping_interval_s=0.05)
    with ApiHarness(None, config) as harness:
        harness.offer_vllm(VllmEndpoint(vllm.base_url, "tiny-llama", None, "remote"))
        yield harness


def read_until_pings(lines, is_ping, pings: int = 2) -> list[str]:
    """The stream's lines up to and including its ``pings``-th ping."""
    seen: list[str] = []
    for line in lines:
        seen.append(line)
        if is_ping(line) and sum(map(is_ping, seen)) == pings:
            return seen
    raise AssertionError(f"the stream ended before {pings} pings: {seen}")


def release(api) -> threading.Thread:
    """A second generation beside the held one: the fake lets both streams' tokens go."""
    second = threading.Thread(
        target=lambda: api.openai().chat.completions.create(model="tiny-llama", messages=HI, max_tokens=8)
    )
    second.start()
    return second


@pytest.fixture
def held(vllm):
    vllm.max_in_flight = 0  # the fake holds tokens until two have run at once, counted from here
    vllm.overlap = 2
    yield
    vllm.overlap = 0


def test_an_anthropic_stream_sends_message_start_and_pings_before_a_slow_first_token(api, held):
    body = {"model": "tiny-llama", "max_tokens": 20, "messages": HI, "stream": True}
    with api.http().stream("POST", "/v1/messages", json=body) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        before = read_until_pings(lines, lambda line: line == "event: ping")
        events = [line.removeprefix("event: ") for line in before if line.startswith("event: ")]
        assert events[0] == "message_start" and "content_block_delta" not in events
        second = release(api)
        rest = list(lines)
    second.join(30)
    data = [json.loads(line[6:]) for line in before + rest if line.startswith("data: ")]
    text = "".join(d["delta"].get("text", "") for d in data if d["type"] == "content_block_delta")
    assert text == "You said: hello there" and data[-1]["type"] == "message_stop"
    assert api.finished_records("messages")[-1].status == 200


def test_an_openai_stream_keeps_the_connection_alive_with_sse_comments(api, held):
    body = {"model": "tiny-llama", "max_tokens": 20, "messages": HI, "stream": True}
    with api.http().stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        before = read_until_pings(lines, lambda line: line == ": ping")
        second = release(api)
        rest = list(lines)
    second.join(30)
    chunks = [json.loads(line[6:]) for line in before + rest if line.startswith("data: {")]
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"  # the opening chunk came first
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == (
        "You said: hello there"
    )
    assert "data: [DONE]" in rest
