"""Tools in the chat page, with real widgets offscreen: a call's card with its three buttons, its result as untrusted
plain text with the byte count, the Continue marker, the drawer's tools picker; and a whole tool round in the
window against the real llama.cpp worker and the real MCP test server."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.core.chat.conversation import Message, MessageStatus, Role
from app.core.chat.tool_use import Approval, ChatTools, ToolUse
from app.core.mcp.config import McpConfig
from app.core.params import SamplingParams
from app.services.mcp.config_file import McpConfigFile
from app.services.mcp.connection import ServerState, ServerStatus, ToolInfo
from app.services.paths import app_paths
from app.ui.pages.chat.tools_picker import ToolsPicker
from app.ui.pages.chat.transcript import ChatView
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.mcp_servers import stdio_server
from tests.support.mcp_test_server import CHAT_TOOLS_FLAG
from tests.support.waiting import until

HOSTILE = '<a href="http://evil.example/run">click me</a> <img src="file:///etc/passwd"> ' + "x" * 5000
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    'Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chat(*calls: ToolUse) -> list[Message]:
    return [Message(Role.USER, "do it"), Message(Role.ASSISTANT, "Let me check.", tool_calls=list(calls))]


@pytest.fixture
def view(qtbot):
    widget = ChatView()
    qtbot.addWidget(widget)
    widget.resize(760, 700)
    widget.show()
    return widget


def card(view, call_id, row=1):
    item = view.message_widget(row)
    assert item is not None and item.tools.isVisible()
    found = item.tools.card(call_id)
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("button", "approval", "reason"),
    [("approve_button", "approved", ""), ("always_button", "always", ""), ("deny_button", "denied", "too risky")],
)
def test_a_waiting_call_shows_tool_server_and_arguments_and_its_three_buttons_decide(qtbot, view, button, approval,
                                                                                     reason):  # fmt: skip
    view.show_messages(chat(ToolUse("c1", "read_file", '{"path": "notes.md"}', "builtin", "read_file")))
    view.set_tools_state(["c1"], busy=True)
    shown = card(view, "c1")
    assert shown.title.text() == "read_file  ·  builtin" and shown.state.text() == "Waiting for your approval"
    assert '"path": "notes.md"' in shown.arguments.toPlainText()
    assert all(b.isVisible() for b in (shown.approve_button, shown.always_button, shown.deny_button))
    assert shown.always_button.text() == "Always for this tool in this chat"
    shown.reason.setText(reason)
    with qtbot.waitSignal(view.tool_decided) as decided:
        qtbot.mouseClick(getattr(shown, button), Qt.MouseButton.LeftButton)
    assert decided.args == ["c1", approval, reason]


def test_a_call_that_is_not_waiting_has_no_buttons_and_decides_nothing(qtbot, view):
    view.show_messages(chat(ToolUse("c1", "calculate", '{"expression": "1+1"}', "builtin", "calculate")))
    view.set_tools_state([], busy=False)
    shown = card(view, "c1")
    assert not shown.approve_button.isVisible() and not shown.reason.isVisible()
    with qtbot.assertNotEmitted(view.tool_decided):
        view.tool_action(1, "c1", "approved", "")


def test_a_result_is_collapsed_shows_its_byte_count_and_opens_as_plain_text(qtbot, view):
    call = ToolUse("c1", "big", "{}", "test", "big", Approval.APPROVED, result=HOSTILE, result_bytes=10_000_000)
    view.show_messages(chat(call))
    shown = card(view, "c1")
    assert shown.result_toggle.text() == "Result · 10,000,000 bytes" and not shown.result.isVisible()
    before = view.message_widget(1).height()
    qtbot.mouseClick(shown.result_toggle, Qt.MouseButton.LeftButton)
    shown = card(view, "c1")
    assert shown.result.isVisible() and view.message_widget(1).height() > before
    text = shown.result.toPlainText()
    assert text.startswith('<a href="http://evil.example/run">click me</a>')  # as text, not as a link
    assert "shown: the first 2,000 characters of 10,000,000 bytes" in text
    document = shown.result.document()
    block = document.begin()
    while block.isValid():
        assert not any(part.format.isAnchor() for part in block.textFormats())
        block = block.next()
    assert "href" not in document.toHtml().replace("&lt;a href", "")
    qtbot.mouseClick(shown.result_toggle, Qt.MouseButton.LeftButton)
    assert not card(view, "c1").result.isVisible()


def test_a_denied_call_says_why_and_what_the_model_was_sent(view):
    call = ToolUse("c1", "calculate", "{}", "builtin", "calculate", Approval.DENIED, reason="no", result="Denied",
                   result_bytes=6)  # fmt: skip
    view.show_messages(chat(call))
    shown = card(view, "c1")
    assert shown.state.text() == "Denied: no" and shown.result_toggle.text() == "Sent to the model · 6 bytes"
    assert "calculate · builtin: Denied: no" in view.toPlainText()


def test_continue_shows_after_a_reply_that_ended_on_settled_calls(qtbot, view):
    done = ToolUse("c1", "pick", '{"color": "red"}', "test", "pick", Approval.ALWAYS, result="picked red",
                   result_bytes=10)  # fmt: skip
    view.show_messages(chat(done))
    view.set_tools_state([], busy=True)
    assert not view.message_widget(1).tools.marker.isVisible()  # still working: no Continue
    view.set_tools_state([], busy=False)
    tools = view.message_widget(1).tools
    assert tools.marker.isVisible() and tools.continue_button.isVisible()
    with qtbot.waitSignal(view.tools_continue_requested):
        qtbot.mouseClick(tools.continue_button, Qt.MouseButton.LeftButton)


def test_the_picker_shows_each_servers_state_and_emits_choices_and_restarts(qtbot):
    picker = ToolsPicker()
    qtbot.addWidget(picker)
    tools = (ToolInfo("builtin", "calculate", "Calculate"), ToolInfo("builtin", "read_file", "Read"))
    statuses = [
        ServerStatus("builtin", "builtin", True, ServerState.READY, tools=tools),
        ServerStatus("notes", "stdio", True, ServerState.FAILED, error="exited with code 1: no such file"),
        ServerStatus("web", "http", True, ServerState.STARTING),
    ]
    picker.show_servers(statuses, ChatTools({"builtin": None}))
    picker.show()
    assert picker.box("builtin").isChecked() and not picker.box("notes").isChecked()
    assert picker.state_label("builtin").text() == "ready · 2 tools"
    assert picker.state_label("notes").text() == "failed: exited with code 1: no such file"
    assert picker.state_label("web").text() == "starting…" and not picker.restart_button("web").isEnabled()
    assert picker.tool_box("builtin", "read_file").isChecked() and picker.tool_box("builtin", "calculate").isEnabled()
    with qtbot.waitSignal(picker.changed) as changed:
        picker.box("notes").click()
    assert changed.args == [{"builtin": None, "notes": None}]
    with qtbot.waitSignal(picker.changed) as changed:
        picker.tool_box("builtin", "read_file").click()  # offer the calculator only
    assert changed.args == [{"builtin": ["calculate"], "notes": None}]
    picker.show_servers(statuses, ChatTools({"builtin": ["calculate"]}))  # as the chat keeps it
    assert not picker.tool_box("builtin", "read_file").isChecked() and not picker.box("notes").isChecked()
    with qtbot.waitSignal(picker.restart_requested) as restart:
        picker.restart_button("notes").click()
    assert restart.args == ["notes"]


async def _offer_only_pick(panel):
    """The person ticks the test server for the chat on screen and keeps only ``pick`` (one bounded tool, which
    random weights and the fake vLLM alike call); the first round must call a tool, the next may not."""
    picker, session = panel.drawer.tools, panel.session
    await until(lambda: "test" in picker.names())
    picker.box("test").click()
    await until(lambda: picker.state_label("test").text().startswith("ready"), timeout=60)
    await until(lambda: "pick" in picker.tool_names("test"))
    for tool in picker.tool_names("test"):
        if tool != "pick":
            picker.tool_box("test", tool).click()
    await until(lambda: session.conversation.tools.servers == {"test": ["pick"]})
    session.tool_choice = lambda r: "required" if r == 0 else "none"


def test_a_tool_round_in_the_window_asks_runs_and_answers(qtbot, qloop, make_window, tmp_path):
    model = write_tiny_gguf(tmp_path / "tiny-tools.gguf", name="tiny-tools", chat_template=TOOLS_TEMPLATE)
    McpConfigFile(app_paths().ensure().mcp_servers_file).save(McpConfig([stdio_server("test", CHAT_TOOLS_FLAG)]))

    async def scenario():
        window = await make_window()
        panel = window.chat_panel
        panel.load_model(str(model))
        await until(lambda: panel.workspace.model is not None, timeout=60)
        panel.sampling.set_params(SamplingParams(max_tokens=200, temperature=0.0))
        session = panel.session
        await _offer_only_pick(panel)
        panel.input.setPlainText("Pick a colour")
        qtbot.keyClick(panel.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        await until(lambda: bool(session.tools.waiting), timeout=60)
        assert panel.composer.generating  # Stop stays offered while a call waits
        shown = card(panel.view, session.tools.waiting[0])
        qtbot.mouseClick(shown.approve_button, Qt.MouseButton.LeftButton)
        await until(lambda: not session.generating, timeout=60)
        messages = session.conversation.messages
        [call] = messages[1].tool_calls
        assert call.approval is Approval.APPROVED and call.result.startswith("picked ")
        assert messages[-1].status is MessageStatus.COMPLETE and len(messages) == 3
        assert "pick · test: Approved" in panel.view.toPlainText()

    qloop.run_until_complete(scenario())


def test_a_background_chat_waiting_for_approval_is_marked_and_announced_until_opened(qtbot, qloop, make_window):
    from app.services.engines.events import VllmEndpoint
    from app.ui.pages.chat.chat_list import ACTIVITY_ROLE, APPROVAL, GENERATING
    from tests.support.fake_openai import FakeOpenAIServer

    McpConfigFile(app_paths().ensure().mcp_servers_file).save(McpConfig([stdio_server("test", CHAT_TOOLS_FLAG)]))
    with FakeOpenAIServer(models=("tiny-llama",)) as fake:
        fake.tool_arguments = {"color": "green"}
        fake.token_delay_s = 0.05

        async def scenario():
            window = await make_window()
            panel = window.chat_panel
            panel.host.offer_vllm(VllmEndpoint(fake.base_url, "tiny-llama", None, "remote"))
            panel.model_bar.select("vllm:tiny-llama")
            panel.load_model("vllm:tiny-llama")
            await until(lambda: panel.workspace.model is not None, timeout=30)
            panel.sampling.set_params(SamplingParams(max_tokens=40, temperature=0.0))
            asking = panel.session
            await _offer_only_pick(panel)
            panel.input.setPlainText("Pick a colour")
            qtbot.keyClick(panel.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
            await until(lambda: bool(asking.tools.waiting), timeout=30)
            chat_id = asking.conversation.id
            panel.new_chat()  # the waiting chat goes on in the background
            await until(lambda: panel.session is not asking and chat_id in panel.workspace.background)

            def mark():
                row = panel.chats.model.row_of(chat_id)
                return None if row is None else panel.chats.model.index(row).data(ACTIVITY_ROLE)

            await until(lambda: mark() == APPROVAL)
            tip = panel.chats.model.index(panel.chats.model.row_of(chat_id)).data(Qt.ItemDataRole.ToolTipRole)
            assert tip == "Pick a colour\nWaiting for your approval of a tool call: open the chat to decide"
            [notice] = [n for n in panel.notice.notices() if n.key == f"approval:{chat_id}"]
            assert "Pick a colour" in notice.text and notice.action_text == "Open chat"
            panel.notice.run_action(notice.key)  # the person opens the chat from the notice
            await until(lambda: panel.session is asking)
            assert mark() is None and not any(n.key == notice.key for n in panel.notice.notices())
            shown = card(panel.view, asking.tools.waiting[0])
            qtbot.mouseClick(shown.approve_button, Qt.MouseButton.LeftButton)
            await until(lambda: not asking.generating, timeout=30)
            assert asking.conversation.messages[1].tool_calls[0].result == "picked green"
            assert mark() is None and GENERATING != APPROVAL

        qloop.run_until_complete(scenario())
