"""Claude Code as a client, in the shape it sends today (2.1.x): its recorded request read and answered, each
Messages API field it (or Anthropic's reference) sends accepted or refused as documented, ``system`` entries inside
``messages``, ``stop_reason: "stop_sequence"`` with the matched string, and the prompt's size in ``message_start``.
The real Claude Code from npm runs headless against the server on the starter model behind the ``claude_code``
marker (it skips, saying why, without node, npx or the package in npm's cache)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.core.chat.conversation import ReplyStats
from app.services.agents.agents import CLAUDE, locate
from app.services.api import anthropic_render
from app.services.api.anthropic_requests import messages_call
from app.services.api.config import ServerConfig
from app.services.api.errors import ApiError
from app.services.api.replies import CollectedReply
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(180)

RECORDED = Path(__file__).parents[1] / "data" / "claude_code" / "say_hi_2.1.197.json"
HI = [{"role": "user", "content": "hello there"}]
BASE = {"model": "m", "max_tokens": 16, "messages": HI}
# The first turn (the system prompt, cut short) and the last one: the recorded request is answered in seconds on a
# tiny model, whose byte-level tokenizer would make its 76 kB prompt ~52k tokens (minutes of prompt evaluation).
EDGES_TEMPLATE = (
    "{% for m in messages %}{% if loop.first or loop.last %}"
    "<|im_start|>{{ m['role'] }}\n{{ (m['content'] or '')[:400] }}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def recorded() -> dict[str, Any]:
    return json.loads(RECORDED.read_text(encoding="utf-8"))


def call_of(**changes: Any) -> Any:
    return messages_call({**BASE, **changes}, 32768)


def refused(**changes: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call_of(**changes)
    assert caught.value.status == 400 and caught.value.message
    return caught.value


# --- the recorded request, read -----------------------------------------------------------------------------------
def test_the_recorded_request_has_claude_codes_shape_today():
    record = recorded()
    body = record["body"]
    assert [m["role"] for m in body["messages"]] == ["user", "system"]  # a system entry after the first user turn
    assert {"thinking", "context_management", "output_config", "metadata", "tools", "system"} <= body.keys()
    assert body["max_tokens"] == 32000 and body["stream"] is True and len(body["tools"]) == 24
    assert "mid-conversation-system" in record["headers"]["anthropic-beta"]


def test_claude_codes_request_reads_into_one_system_prompt_and_its_user_turn():
    body = recorded()["body"]
    call = messages_call(body, 32768)
    system, user = call.messages
    assert system["role"] == "system" and user["role"] == "user"
    top = body["system"][2]["text"]
    entry = body["messages"][1]["content"]
    assert system["content"].index(top[:200]) < system["content"].index(entry[:200])  # in the order sent
    assert "x-anthropic-billing-header" not in system["content"]  # its per-request line would bust the prefix cache
    assert user["content"].endswith("say hi")
    assert call.stream and call.thinking and call.sampling == {"max_tokens": 32000}
    assert call.options.enable_thinking is None and call.options.reasoning_effort == "high"  # adaptive, effort high
    assert len(call.options.tools) == 24 and call.options.tool_choice is None
    assert call.options.parallel_tool_calls is None


@pytest.mark.parametrize("system", [
    "x-anthropic-billing-header: cc_version=2.1.197.1c0; cc_entrypoint=sdk-cli;\nYou are X.",
    [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.123;"},
     {"type": "text", "text": "You are X."}],
])  # fmt: skip
def test_claude_codes_attribution_line_never_reaches_the_prompt(system):
    assert call_of(system=system).messages[0] == {"role": "system", "content": "You are X."}


# --- system entries -----------------------------------------------------------------------------------------------
def test_system_entries_join_the_system_prompt_in_order_and_the_turns_around_them_combine():
    call = call_of(system="Top.", messages=[
        {"role": "user", "content": "one"},
        {"role": "system", "content": "Second."},
        {"role": "user", "content": [{"type": "text", "text": "two"}]},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": [{"type": "text", "text": "Third", "cache_control": {"type": "ephemeral"}},
                                       {"type": "text", "text": "and fourth."}]},
        {"role": "user", "content": "three"},
    ])  # fmt: skip
    assert call.messages == [
        {"role": "system", "content": "Top.\n\nSecond.\n\nThird\n\nand fourth."},
        {"role": "user", "content": "one\n\ntwo"},  # consecutive user turns are one turn, as Anthropic combines them
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "three"},
    ]


def test_a_system_entry_alone_becomes_the_system_prompt():
    call = call_of(messages=[{"role": "user", "content": "hi"}, {"role": "system", "content": "Be brief."}])
    assert call.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


def test_clear_at_next_user_message_shows_an_entry_only_to_the_turn_it_follows():
    note = {"role": "system", "content": "Only now.", "clear_at": "next_user_message"}
    now = call_of(messages=[{"role": "user", "content": "a"}, note])
    assert now.messages[0] == {"role": "system", "content": "Only now."}
    later = call_of(messages=[{"role": "user", "content": "a"}, note, {"role": "assistant", "content": "b"},
                              {"role": "user", "content": "c"}])  # fmt: skip
    assert [m["role"] for m in later.messages] == ["user", "assistant", "user"]


def test_an_effort_on_a_system_entry_applies_to_its_turn():
    effort = {"role": "system", "output_config": {"effort": "low"}}  # no content: allowed with an output_config
    assert call_of(messages=[*HI, effort], output_config={"effort": "max"}).options.reasoning_effort == "low"
    earlier = call_of(messages=[*HI, effort, {"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}],
                      output_config={"effort": "medium"})  # fmt: skip
    assert earlier.options.reasoning_effort == "medium"  # the entry belonged to an earlier turn


@pytest.mark.parametrize(
    ("messages", "where"),
    [([{"role": "system", "content": "x"}], "messages"),  # nothing to answer
     ([*HI, {"role": "system"}], "messages[1]"),  # neither content nor output_config
     ([*HI, {"role": "system", "content": 5}], "messages[1].content"),
     ([*HI, {"role": "system", "content": [{"type": "image"}]}], "messages[1].content[0]"),
     ([*HI, {"role": "system", "content": "x", "clear_at": "soon"}], "messages[1]"),
     ([*HI, {"role": "system", "content": [{"type": "tool_removal", "tool": {"name": "Bash"}}]}], "messages[1]"),
     ([*HI, {"role": "system", "output_config": {"effort": "extreme"}}], "messages[1].output_config"),
     ([*HI, {"role": "wizard", "content": "x"}], "messages[1]")],
)  # fmt: skip
def test_bad_system_entries_are_400_naming_the_entry(messages, where):
    assert refused(messages=messages).param == where


# --- everything else Claude Code (and Anthropic's reference) sends --------------------------------------------------
def test_what_only_anthropics_servers_do_is_accepted_and_changes_nothing():
    plain = call_of(system=[{"type": "text", "text": "S"}], tools=[{"name": "t", "input_schema": {"type": "object"}}])
    extras = call_of(
        system=[{"type": "text", "text": "S", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        tools=[{"name": "t", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"},
                "defer_loading": False, "strict": True, "eager_input_streaming": True}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "hello there",
                                                "cache_control": {"type": "ephemeral"}}]}],
        cache_control={"type": "ephemeral"}, metadata={"user_id": "u"}, service_tier="auto", speed="standard",
        context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        container="container_1", inference_geo="us", diagnostics={"previous_message_id": "msg_1"},
    )  # fmt: skip
    assert extras.messages == plain.messages and extras.options == plain.options and extras.sampling == plain.sampling


@pytest.mark.parametrize(
    ("thinking", "switch", "shown"),
    [({"type": "enabled", "budget_tokens": 2048}, True, True), ({"type": "disabled"}, False, False),
     ({"type": "adaptive"}, None, True), ({"type": "between_tools"}, None, True),
     ({"type": "adaptive", "display": "omitted"}, None, False), (None, None, False)],
)  # fmt: skip
def test_thinking_types_switch_the_template_and_show_the_thinking(thinking, switch, shown):
    call = call_of(thinking=thinking)
    assert call.options.enable_thinking is switch and call.thinking is shown


@pytest.mark.parametrize(
    ("change", "param"),
    [({"thinking": {"type": "sometimes"}}, "thinking"), ({"thinking": {"type": "enabled", "budget_tokens": "lots"}},
      "thinking.budget_tokens"), ({"thinking": {"type": "enabled", "display": "loud"}}, "thinking"),
     ({"output_config": {"effort": "extreme"}}, "output_config"), ({"output_config": "high"}, "output_config"),
     ({"output_config": {"format": {"type": "xml"}}}, "output_config"),
     ({"mcp_servers": [{"type": "url", "url": "https://example.com/mcp", "name": "x"}]}, "mcp_servers"),
     ({"compaction": {"type": "enabled"}}, "compaction"), ({"thread": {"type": "create"}}, "thread"),
     ({"tool_choice": {"type": "auto", "disable_parallel_tool_use": "yes"}}, "tool_choice"),
     ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]")],
)  # fmt: skip
def test_what_the_server_cannot_honour_or_read_is_400_naming_the_field(change, param):
    assert refused(**change).param == param


@pytest.mark.parametrize(
    ("choice", "parallel"),
    [({"type": "auto"}, None), (None, None), ({"type": "any", "disable_parallel_tool_use": True}, False),
     ({"type": "any", "disable_parallel_tool_use": False}, True)],
)  # fmt: skip
def test_disable_parallel_tool_use_maps_to_parallel_tool_calls(choice, parallel):
    call = call_of(tools=[{"name": "t", "input_schema": {"type": "object"}}], tool_choice=choice)
    assert call.options.parallel_tool_calls is parallel


def test_output_config_format_is_a_json_schema_response_format():
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    call = call_of(output_config={"effort": "xhigh", "format": {"type": "json_schema", "schema": schema}})
    assert call.options.json_schema == schema and call.options.reasoning_effort == "high"


# --- stop sequences and the prompt's size, rendered ------------------------------------------------------------------
def test_a_requested_stop_sequence_is_reported_with_the_matched_string():
    stats = ReplyStats(prompt_tokens=7, completion_tokens=3, finish_reason="stop", stop_sequence="END")
    reply = CollectedReply(text="a b")
    body = anthropic_render.message_body("m", reply, "stop", stats, thinking=False, stops=("END", "STOP"))
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "END")
    events = anthropic_render.MessageEvents("m", thinking=False, stops=("END",))
    delta = dict(events.last("stop", stats))["message_delta"]
    assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    preset = ReplyStats(finish_reason="stop", stop_sequence="\n\n")  # the model's preset stop, not the client's
    assert anthropic_render.message_body("m", reply, "stop", preset, thinking=False)["stop_reason"] == "end_turn"


def test_message_start_carries_the_prompts_size():
    start = dict(anthropic_render.MessageEvents("m", thinking=False).first(1234))["message_start"]
    assert start["message"]["usage"] == {"input_tokens": 1234, "output_tokens": 0}


# --- against the server -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-claude-code")
    write_tiny_gguf(folder / "tiny-edges.gguf", name="tiny-edges", chat_template=EDGES_TEMPLATE)
    write_tiny_gguf(folder / "tiny-chat.gguf", name="tiny-chat")
    with ApiHarness(folder, ServerConfig(port=0)) as harness:
        yield harness


def sse_events(response: Any) -> list[tuple[str, dict[str, Any]]]:
    events, name = [], None
    for line in response.iter_lines():
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:") and name is not None:
            events.append((name, json.loads(line.removeprefix("data:"))))
    return events


def assert_in_anthropics_order(events: list[tuple[str, dict[str, Any]]]) -> None:
    names = [n for n, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"], names
    blocks = [n for n in names[2:-2] if n != "ping"]
    assert blocks[0] == "content_block_start" and blocks[-1] == "content_block_stop", names
    starts = [d["index"] for n, d in events if n == "content_block_start"]
    assert starts == list(range(len(starts)))


def test_the_recorded_claude_code_request_is_answered_with_events_in_order(api):
    record = recorded()
    body = {**record["body"], "model": "tiny-edges", "max_tokens": 24}
    headers = {k: v for k, v in record["headers"].items() if k != "content-type"}
    with api.http() as http, http.stream("POST", record["path"], json=body, headers=headers) as response:
        assert response.status_code == 200, response.read()
        events = sse_events(response)
    assert_in_anthropics_order(events)
    start = events[0][1]["message"]["usage"]["input_tokens"]
    final = next(d for n, d in events if n == "message_delta")["usage"]
    assert start > 0 and start == final["input_tokens"]  # counted before the reply, as the engine counts it
    done = api.finished_records("messages")[-1]
    assert done.status == 200 and done.prompt_tokens == start and done.model == "tiny-edges"


def test_the_sdk_sends_what_claude_code_sends_and_gets_a_message(api):
    message = api.anthropic().beta.messages.create(
        model="tiny-chat", max_tokens=8, system=[{"type": "text", "text": "Be brief.",
                                                  "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "hello there"}, {"role": "system", "content": "Mind the date."}],
        thinking={"type": "adaptive"}, output_config={"effort": "high"}, metadata={"user_id": "u"},
        context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        betas=["claude-code-20250219", "context-management-2025-06-27", "mid-conversation-system-2026-04-07"],
    )  # fmt: skip
    assert message.type == "message" and message.usage.input_tokens > 0 and message.stop_reason in (
        "end_turn", "max_tokens")  # fmt: skip


def test_message_start_has_the_prompt_tokens_the_reply_counts(api):
    with api.http() as http, http.stream("POST", "/v1/messages", json={
        "model": "tiny-chat", "max_tokens": 4, "stream": True, "messages": HI,
    }) as response:  # fmt: skip
        events = sse_events(response)
    start = events[0][1]["message"]["usage"]
    assert start["input_tokens"] > 0 and start["input_tokens"] == events[-2][1]["usage"]["input_tokens"]


def test_a_stop_sequence_ends_the_reply_and_is_reported(api):
    client = api.anthropic()
    greedy = {"extra_body": {"temperature": 0}}  # the SDK (2.x) no longer takes it as an argument
    free = client.messages.create(model="tiny-chat", max_tokens=24, messages=HI, **greedy)
    text = free.content[0].text
    assert len(text) > 8, text
    stop = text[len(text) // 2 :][:3]
    stopped = client.messages.create(model="tiny-chat", max_tokens=24, messages=HI, stop_sequences=[stop], **greedy)
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", stop)
    assert stopped.content[0].text == text[: text.index(stop)]
    with client.messages.stream(model="tiny-chat", max_tokens=24, messages=HI, stop_sequences=[stop],
                                **greedy) as stream:  # fmt: skip
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)


# --- the real Claude Code --------------------------------------------------------------------------------------------
CLAUDE_CODE = CLAUDE.npm_package


def _npm_env() -> dict[str, str]:
    """npm's own cache (the user's), offline first: the probe and the run never wait on the network."""
    env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_prefer_offline": "true"}
    try:
        cache = subprocess.run(["npm", "config", "get", "cache"], capture_output=True, text=True, timeout=60,
                               check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return env
    return {**env, "npm_config_cache": cache} if cache else env


def claude_code_or_skip() -> tuple[list[str], dict[str, str]]:
    """What starts Claude Code and the environment to run it in; skips saying what is missing."""
    for tool in ("node", "npx", "npm"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: Claude Code needs Node.js (https://nodejs.org)")
    env = _npm_env()
    found = locate(CLAUDE, env)  # as `llm-workstation launch claude` finds it (npx: --offline -y, from the cache)
    if found is None:
        pytest.skip(f"{CLAUDE_CODE} is not installed nor in npm's npx cache (install it: npx -y {CLAUDE_CODE} "
                    "--version)")  # fmt: skip
    try:
        probe = subprocess.run([*found.argv, "--version"], capture_output=True, text=True, timeout=120, env=env,
                               stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.skip(f"Claude Code ({found.where}) did not answer '--version' in 120 s")
    if probe.returncode != 0 or "Claude Code" not in probe.stdout:
        pytest.skip(f"Claude Code ({found.where}) does not run: {(probe.stderr or probe.stdout).strip()[-200:]}")
    return [*found.argv], env


@pytest.mark.claude_code
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_claude_code_runs_a_turn_headless_against_the_starter_model(tmp_path):
    from app.services import starter_model

    claude, env = claude_code_or_skip()
    if not starter_model.package_installed():
        pytest.skip(f"the starter model is not installed: {starter_model.INSTALL_HINT}")
    models = tmp_path / "models"
    starter_model.ensure_starter_model(models)
    home = tmp_path / "home"
    home.mkdir()
    with ApiHarness(models, ServerConfig(port=0, n_ctx=24576), settings_file=tmp_path / "settings.json") as api:
        name = api.openai().models.list().data[0].id
        run = subprocess.run(
            [*claude, "-p", "say hi", "--max-turns", "1"],
            capture_output=True, text=True, timeout=1700, stdin=subprocess.DEVNULL, cwd=tmp_path,
            env={**env, "HOME": str(home), "ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "dummy",
                 "ANTHROPIC_MODEL": name, "ANTHROPIC_DEFAULT_HAIKU_MODEL": name, "DISABLE_TELEMETRY": "1",
                 "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "API_TIMEOUT_MS": "1500000"},
        )  # fmt: skip
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
        exchange = [r for r in api.finished_records("messages") if r.model == name]
    seen = [(r.status, r.prompt_tokens, r.ttft_ms and round(r.ttft_ms / 1000), r.error) for r in exchange]
    served = [r for r in exchange if r.status == 200]
    # 499: Claude Code stopped waiting for the first byte (a slow machine's prompt evaluation) and asked again
    assert served and all(r.status in (200, 499) for r in exchange), seen
    assert max(r.prompt_tokens or 0 for r in served) > 10_000, seen  # Claude Code's whole prompt reached the model
