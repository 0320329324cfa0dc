"""One reply reader for the chat and the API server. One stream per engine — the real llama.cpp worker (thinking and
Hermes calls in its raw text, forced by a grammar), the real Ollama backend against the fake Ollama server (its
thinking field, a call it parsed with the arguments as an object), vLLM's SSE as recorded and read by its backend's
chunk reader (reasoning, and calls streamed in pieces) — gives the chat's message and the API's reply, whole and
streamed, the same text, thinking and tool calls."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from app.backends.openai_stream import Reply, absorb_delta, sse_data
from app.backends.protocol import Delta, ReplyHandle
from app.backends.streamed_reply import StreamedReply
from app.core import safe_json
from app.core.chat.conversation import Message, Role
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from app.services.api.openai_render import ChatChunks
from app.services.api.replies import ReplyRun, collect
from app.services.chat.message_reply import MessageReply
from app.services.chat.session import ChatObserver
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost
from app.services.engines.reply_formats import reply_parser
from tests.services.test_api_server import FORCED, THINKING_TOOLS_TEMPLATE, TOOLS, gbnf_literal
from tests.support.fake_ollama import FakeOllama
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(180)

STREAMS = Path(__file__).parents[1] / "data" / "streams"
HI = [{"role": "user", "content": "hello there"}]
CALLS = {  # what each stream calls: (name, arguments as an object)
    "llamacpp": [("get_time", {"zone": "CET"}), ("get_time", {"zone": "UTC"})],
    "ollama": [("get_weather", {"city": "Rome", "days": 2})],
    "vllm-tools": [("get_weather", {"city": "Oslo", "days": 2}), ("get_time", {"zone": "CET"})],
    "vllm-reasoning": [],
}


def recorded_vllm(name: str) -> list[Delta]:
    reply, deltas = Reply(sent_at=0.0), []
    for line in (STREAMS / name).read_text("utf-8").splitlines():
        data = sse_data(line)
        if data is not None and data != "[DONE]" and (delta := absorb_delta(reply, safe_json.loads(data))):
            deltas.append(delta)
    return deltas


async def _record(host: EngineHost, kind: EngineKind, options: GenerationOptions) -> list[Delta]:
    handle = host.engine(kind).stream_chat(HI, SamplingParams(max_tokens=1), options)
    assert isinstance(handle, ReplyHandle)  # every engine's reply has one shape
    await handle.aclose()
    reply = host.stream_chat(kind, HI, SamplingParams(max_tokens=300, seed=1), options)
    deltas = [delta async for delta in reply]
    assert reply.stats is not None and reply.stats.completion_tokens > 0  # the reply's own figures, from its handle
    return deltas


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    """(engine kind, options, deltas) per stream, with the host that ran them (its models still loaded)."""
    gguf = write_tiny_gguf(tmp_path_factory.mktemp("reading") / "tiny-think.gguf", name="tiny-think",
                           chat_template=THINKING_TOOLS_TEMPLATE)  # fmt: skip
    with FakeOllama() as fake:
        fake.add_model("qwen3", capabilities=["completion", "thinking", "tools"])
        fake.thinking = ["The", " user", " wants", " weather", "."]
        fake.tool_calls = [{"function": {"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}}]
        loop = asyncio.new_event_loop()
        host = EngineHost(ollama_host=fake.host)

        async def record() -> dict[str, tuple[EngineKind, GenerationOptions, list[Delta]]]:
            await host.load(str(gguf), LoadParams(n_ctx=2048))
            await host.load("ollama:qwen3", LoadParams(n_ctx=2048))
            forced = GenerationOptions(grammar=gbnf_literal(FORCED), tools=TOOLS)
            tools = GenerationOptions(tools=TOOLS)
            return {
                "llamacpp": (EngineKind.LLAMACPP, forced, await _record(host, EngineKind.LLAMACPP, forced)),
                "ollama": (EngineKind.OLLAMA, tools, await _record(host, EngineKind.OLLAMA, tools)),
                "vllm-tools": (EngineKind.VLLM, tools, recorded_vllm("vllm_tool_calls.sse")),
                "vllm-reasoning": (EngineKind.VLLM, GenerationOptions(), recorded_vllm("vllm_reasoning_content.sse")),
            }

        try:
            yield host, loop, loop.run_until_complete(asyncio.wait_for(record(), 120))
        finally:
            loop.run_until_complete(host.close())
            loop.close()


class Shown(ChatObserver):
    """What the chat shows as the reply streams."""

    def __init__(self) -> None:
        self.answer, self.thinking = "", ""

    def reply_delta(self, text: str) -> None:
        self.answer += text

    def reply_thinking(self, text: str) -> None:
        self.thinking += text

    def reply_recast(self, thinking: str) -> None:
        self.answer, self.thinking = "", thinking


async def _chat(host: EngineHost, kind: EngineKind, options: GenerationOptions, deltas: list[Delta]):
    message, shown = Message(Role.ASSISTANT, ""), Shown()
    reading = MessageReply(message, shown)
    await reading.start(host, kind, options)
    for delta in deltas:
        reading.feed(delta)
    reading.finish()
    reading.apply()
    assert (shown.answer, shown.thinking.strip()) == (message.content, message.reasoning)  # shown as it is kept
    return message.content, message.reasoning, [(name, args) for _id, name, args in reading.calls]


async def _replay(deltas: list[Delta]):
    for delta in deltas:
        yield delta


async def _api(host: EngineHost, kind: EngineKind, options: GenerationOptions, deltas: list[Delta], streamed: bool):
    parser = await reply_parser(kind, host.loaded(kind), options)
    run = ReplyRun(StreamedReply(lambda _reply: _replay(deltas)), parser, engine=str(kind))
    if not streamed:
        whole = await collect(run, run.steps())
        return whole.text, whole.thinking, [(c["name"], c["arguments"]) for c in whole.calls]
    chunks, text, thinking = ChatChunks("m", include_usage=False), "", ""
    calls: dict[int, list[str]] = {}
    async for outs in run.steps():  # read back as a client reads the chunks
        for chunk in chunks.outs(outs):
            delta = chunk["choices"][0]["delta"]
            text += delta.get("content") or ""
            thinking += delta.get("reasoning_content") or ""
            for piece in delta.get("tool_calls") or []:
                call = calls.setdefault(piece["index"], ["", ""])
                call[0] = piece["function"].get("name") or call[0]
                call[1] += piece["function"].get("arguments") or ""
    return text, thinking.strip(), [(name, args or "{}") for name, args in calls.values()]


@pytest.mark.parametrize("name", list(CALLS))
def test_the_chat_and_the_api_read_each_engines_stream_alike(streams, name):
    host, loop, recorded = streams
    kind, options, deltas = recorded[name]
    chat = loop.run_until_complete(_chat(host, kind, options, deltas))
    assert loop.run_until_complete(_api(host, kind, options, deltas, streamed=False)) == chat
    assert loop.run_until_complete(_api(host, kind, options, deltas, streamed=True)) == chat
    text, thinking, calls = chat
    assert [(n, json.loads(a)) for n, a in calls] == CALLS[name]
    if name == "llamacpp":  # a call written inside the thinking stays thinking, never a call
        assert text == "Checking." and "I could use <tool_call>" in thinking
    elif name == "ollama":  # the fake echoes the prompt as its answer
        assert (text, thinking) == ("You said: hello there", "The user wants weather.")
    elif name == "vllm-tools":
        assert (text, thinking) == ("Let me check.", "")
    else:
        assert (text, thinking) == ("2 + 2 = **4**.", "Okay, the user asks 2+2. That is 4.")
