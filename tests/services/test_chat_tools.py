"""The tool loop of a chat: the real llama.cpp worker on a generated GGUF whose template shows tools, the real MCP
test server (stdio), a real SQLite history. Random weights cannot decide to call a tool, so the first round forces
a call (``tool_choice: required``, under a grammar, with a bounded argument schema) and later rounds offer none
unless a test says otherwise."""

from __future__ import annotations

import asyncio

import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.chat.conversation import MessageStatus, Role
from app.core.chat.tool_use import MAX_ROUNDS, Approval, ChatTools
from app.core.mcp.config import McpConfig
from app.core.mcp.results import MAX_RESULT_BYTES
from app.core.params import LoadParams, SamplingParams
from app.services.chat.history import AsyncConversationStore
from app.services.chat.session import ChatObserver, ChatSession
from app.services.chat.tool_loop import STOPPED_RESULT, denial_text
from app.services.engines.host import EngineHost
from app.services.mcp.manager import McpManager
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.mcp_servers import stdio_server
from tests.support.mcp_test_server import CHAT_TOOLS_FLAG, HANG_STARTED_LINE
from tests.support.waiting import until

TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    'Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SAMPLING = SamplingParams(max_tokens=200, temperature=0.0, seed=5)


@pytest.fixture(scope="module")
def tools_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("tools") / "tiny-tools.gguf", name="tiny-tools",
                           chat_template=TOOLS_TEMPLATE)  # fmt: skip


class Approver(ChatObserver):
    """Decides each call that waits, as ``decision(call)`` says (None: leave it waiting); records what it saw."""

    def __init__(self, session_ref, decision):
        self.session_ref = session_ref
        self.decision = decision
        self.asked: list[str] = []  # tool names, in the order they were asked about
        self.finished = 0

    def tools_changed(self, message):
        session = self.session_ref()
        for call in message.tool_calls:
            if call.id in session.tools.waiting and call.id not in self.asked:
                self.asked.append(call.id)
                choice = self.decision(call)
                if choice is not None:
                    session.decide(call.id, *choice)

    def reply_finished(self, message):
        self.finished += 1


class Harness:
    def __init__(self, session, manager, prompts):
        self.session, self.manager, self.prompts = session, manager, prompts


def run(coro, timeout=180):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def harness(tmp_path, model, decision, tools, first_only=True):
    store = await AsyncConversationStore.open(tmp_path / "chats.sqlite3")
    host = EngineHost(LlamaCppBackend())
    await host.load(str(model), LoadParams(n_ctx=4096))
    manager = McpManager(config=McpConfig([stdio_server("test", CHAT_TOOLS_FLAG)]))
    prompts: list[list[dict]] = []
    real_stream = host.stream_chat

    def recording(kind, messages, sampling, options=None):  # what the model is sent, round by round
        prompts.append([dict(m) for m in messages])
        return real_stream(kind, messages, sampling, options)

    host.stream_chat = recording
    session = ChatSession(store, host, lambda: SAMPLING, mcp=manager)
    session.observer = Approver(lambda: session, decision)
    session.tool_choice = (lambda r: "required" if r == 0 else "none") if first_only else (lambda r: "required")
    await session.new()
    await session.set_tools(ChatTools({"test": tools}))
    return Harness(session, manager, prompts)


async def close(h):
    await h.manager.close()
    await h.session.host.close()
    await h.session.store.aclose()


def tool_messages(prompt):
    return [m for m in prompt if m["role"] == "tool"]


def test_an_approved_call_runs_and_its_result_goes_back_to_the_model(tmp_path, tools_gguf):
    async def scenario():
        h = await harness(tmp_path, tools_gguf, lambda call: (Approval.APPROVED,), ["pick"])
        try:
            final = await h.session.send("Pick a colour")
            saved = await h.session.store.load(h.session.conversation.id)
            return h, final, saved
        finally:
            await close(h)

    h, final, saved = run(scenario())
    first, second = saved.messages[1], saved.messages[2]
    [call] = first.tool_calls
    assert call.name == "pick" and call.server == "test" and call.approval is Approval.APPROVED
    assert call.arguments_object()["color"] in ("red", "green", "blue")
    assert call.result == f"picked {call.arguments_object()['color']}" and not call.is_error
    assert final.id == second.id and second.role is Role.ASSISTANT and not second.tool_calls
    assert second.status is MessageStatus.COMPLETE and h.session.observer.finished == 1
    assert len(h.prompts) == 2 and h.prompts[0][-1]["role"] == "user"
    assert tool_messages(h.prompts[1]) == [{"role": "tool", "tool_call_id": call.id, "name": "pick",
                                            "content": call.result}]  # fmt: skip
    assert h.prompts[1][-2]["tool_calls"][0]["function"]["name"] == "pick"


def test_a_denied_call_does_not_run_and_the_reason_reaches_the_next_prompt(tmp_path, tools_gguf):
    async def scenario():
        h = await harness(tmp_path, tools_gguf, lambda call: (Approval.DENIED, "not colours today"), ["pick"])
        try:
            await h.session.send("Pick a colour")
            return h, await h.session.store.load(h.session.conversation.id)
        finally:
            await close(h)

    h, saved = run(scenario())
    [call] = saved.messages[1].tool_calls
    assert call.approval is Approval.DENIED and call.reason == "not colours today"
    assert call.result == denial_text("not colours today") and "picked" not in call.result
    assert tool_messages(h.prompts[1])[0]["content"] == "The user denied this call. Their reason: not colours today"


def test_always_runs_the_tool_again_without_asking_and_is_kept_with_the_chat(tmp_path, tools_gguf):
    async def scenario():
        h = await harness(tmp_path, tools_gguf, lambda call: (Approval.ALWAYS,), ["pick"])
        try:
            await h.session.send("Pick a colour")
            asked_first = len(h.session.observer.asked)
            await h.session.send("Another one")
            return h, asked_first, await h.session.store.load(h.session.conversation.id)
        finally:
            await close(h)

    h, asked_first, saved = run(scenario())
    assert asked_first == 1 and len(h.session.observer.asked) == 1  # the second call was not asked about
    assert saved.tools.always == ["test/pick"]
    calls = [c for m in saved.messages for c in m.tool_calls]
    assert [c.approval for c in calls] == [Approval.ALWAYS, Approval.ALWAYS]
    assert all(c.result.startswith("picked ") for c in calls)


def test_a_server_that_crashes_mid_call_is_an_error_result_and_the_chat_goes_on(tmp_path, tools_gguf):
    async def scenario():
        h = await harness(tmp_path, tools_gguf, lambda call: (Approval.APPROVED,), ["crash"])
        try:
            reply = await h.session.send("Crash it")
            status = h.manager.status("test")
            h.session.tool_choice = lambda r: "none"
            after = await h.session.send("Still there?")  # the app lives: the chat answers
            return h, reply, status, after, await h.session.store.load(h.session.conversation.id)
        finally:
            await close(h)

    h, reply, status, after, saved = run(scenario())
    [call] = saved.messages[1].tool_calls
    assert call.is_error and call.result.startswith("Error: ") and "crash" in call.result
    assert str(status.state) == "failed"
    assert tool_messages(h.prompts[1])[0]["content"] == call.result
    assert reply.status is MessageStatus.COMPLETE and after.status is MessageStatus.COMPLETE


def test_a_10_mb_result_is_cut_to_64_kib_for_the_model_with_its_byte_count(tmp_path, tools_gguf):
    async def scenario():
        h = await harness(tmp_path, tools_gguf, lambda call: (Approval.APPROVED,), ["ten_mb"])
        try:
            await h.session.send("Big")
            return h, await h.session.store.load(h.session.conversation.id)
        finally:
            await close(h)

    h, saved = run(scenario())
    [call] = saved.messages[1].tool_calls
    assert call.result_bytes == 10_000_000
    sent = tool_messages(saved.prompt_messages())[0]["content"]  # what the next round sends
    assert len(sent.encode()) <= MAX_RESULT_BYTES and sent.startswith("0123456789") and "10,000,000 bytes" in sent
    # 64 KiB of digits is ~65,000 tokens of this model: more than its 4,096-token context. The chat's overflow
    # policy sees that (the tool results are counted) and the reply says so, instead of the engine failing.
    answer = saved.messages[-1]
    assert len(h.prompts) == 1 and answer.status is MessageStatus.FAILED and "context" in answer.error


def running(messages):
    calls = messages[-1].tool_calls if messages else []
    return bool(calls) and calls[0].approval.runs


def test_stop_during_a_call_cancels_it_and_ends_the_loop_at_once(tmp_path, tools_gguf):
    async def scenario():
        h = await harness(tmp_path, tools_gguf, lambda call: (Approval.APPROVED,), ["hang"])
        try:
            sending = asyncio.ensure_future(h.session.send("Wait"))
            await until(lambda: running(h.session.conversation.messages))
            await until(lambda: HANG_STARTED_LINE in h.manager.stderr_tail("test"))  # in flight on the server
            h.session.stop()
            done, _ = await asyncio.wait({sending}, timeout=60)  # at once, not when the ten-minute call ends
            assert sending in done
            return h, sending.result(), await h.session.store.load(h.session.conversation.id)
        finally:
            await close(h)

    h, reply, saved = run(scenario())
    assert not h.session.generating
    assert reply.status is MessageStatus.STOPPED and len(saved.messages) == 2 and len(h.prompts) == 1
    [call] = saved.messages[1].tool_calls
    assert call.approval is Approval.APPROVED and call.result == STOPPED_RESULT
    assert saved.messages[1].status is MessageStatus.STOPPED


def test_the_loop_stops_at_8_rounds_and_continue_goes_on(tmp_path, tools_gguf):
    async def scenario():
        h = await harness(tmp_path, tools_gguf, lambda call: (Approval.ALWAYS,), ["pick"], first_only=False)
        try:
            await h.session.send("Keep picking")
            capped = await h.session.store.load(h.session.conversation.id)
            h.session.tool_choice = lambda r: "none"
            answer = await h.session.continue_tools()
            return h, capped, answer
        finally:
            await close(h)

    h, capped, answer = run(scenario(), timeout=300)
    replies = capped.messages[1:]
    assert len(replies) == MAX_ROUNDS == 8 and all(len(r.tool_calls) >= 1 for r in replies)
    assert all(c.settled for c in replies[-1].tool_calls)  # the last round's calls ran; the model was not asked again
    assert len(h.prompts) == MAX_ROUNDS + 1 and answer is not None and not answer.tool_calls


def test_stop_while_a_call_waits_for_approval_cancels_it_without_running_it(tmp_path, tools_gguf):
    async def scenario():
        h = await harness(tmp_path, tools_gguf, lambda call: None, ["pick"])  # nobody answers
        try:
            sending = asyncio.ensure_future(h.session.send("Pick"))
            await until(lambda: h.session.tools.waiting)
            h.session.stop()
            reply = await sending
            return h, reply, await h.session.store.load(h.session.conversation.id)
        finally:
            await close(h)

    h, reply, saved = run(scenario())
    [call] = saved.messages[1].tool_calls
    assert call.approval is Approval.CANCELLED and call.result == STOPPED_RESULT
    assert reply.status is MessageStatus.STOPPED and h.session.tools.waiting == [] and len(h.prompts) == 1
