"""Codex CLI as a client of the Responses API, in the shape it sends today (0.171): its recorded request (function
tools, a ``custom`` freeform ``apply_patch`` with a Lark grammar, a ``namespace`` of functions, ``web_search``,
``store: false``, ``include: ["reasoning.encrypted_content"]``, ``prompt_cache_key``, ``client_metadata``, and a
function call and a custom tool call answered) read and answered by the real server; custom tools, namespaces and
built-in tools with the official ``openai`` SDK as the client; each bad input refused with its ``param``. The real
Codex from npm runs headless against the server on the starter model behind the ``codex`` marker (it skips, saying
why, without the ``codex`` binary on PATH or the package in npm's cache)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pydantic
import pytest

from app.core.chat.reply_reader import CallArgs, CallStart, TextOut
from app.services.api.config import ServerConfig
from app.services.api.responses_render import ResponseEvents, ResponseHead
from app.services.api.responses_requests import responses_ask
from app.services.api.responses_tools import read_tools
from tests.services.test_api_responses import HERMES_TOOLS_TEMPLATE, literal
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(180)

RECORDED = Path(__file__).parents[1] / "data" / "codex" / "exec_tool_round_trip_0.171.0.json"
# The system prompt (cut short) and the last turn: the recorded request is answered in seconds on a tiny model,
# whose byte-level tokenizer would make its 48 kB prompt tens of thousands of tokens.
EDGES_TEMPLATE = (
    "{% for m in messages %}{% if loop.first or loop.last %}"
    "<|im_start|>{{ m['role'] }}\n{{ (m['content'] or '')[:400] }}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files with a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" /(.|\\n)*/'},
}
LOOKUP = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["id"],
          "additionalProperties": False}  # fmt: skip
CRM = {"type": "namespace", "name": "crm", "description": "Customer records.",
       "tools": [{"type": "function", "name": "lookup", "parameters": LOOKUP}]}  # fmt: skip
# The random-weight model writes exactly this call (its free string would run to max_output_tokens otherwise).
PATCH_CALL = literal('<tool_call>{"name": "apply_patch", "arguments": {"input": "*** Begin Patch\\n"}}</tool_call>')
LOOKUP_CALL = literal('<tool_call>{"name": "crm__lookup", "arguments": {"id": 7}}</tool_call>')


def recorded() -> dict[str, Any]:
    return json.loads(RECORDED.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("responses-codex")
    write_tiny_gguf(folder / "tiny-edges.gguf", name="tiny-edges", chat_template=EDGES_TEMPLATE)
    write_tiny_gguf(folder / "tiny-tools.gguf", name="tiny-tools", chat_template=HERMES_TOOLS_TEMPLATE)
    with ApiHarness(folder, ServerConfig(port=0)) as harness:
        yield harness


def stream_events(response: Any) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


# --- the recorded request, read -------------------------------------------------------------------------------------
def test_the_recorded_request_has_codexs_shape_today():
    body = recorded()["body"]
    kinds = [t["type"] for t in body["tools"]]
    assert {"function", "custom", "namespace", "web_search"} == set(kinds)
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"] and body["stream"] is True
    assert {"prompt_cache_key", "client_metadata", "parallel_tool_calls", "reasoning"} <= body.keys()
    items = [i.get("type") for i in body["input"]]
    assert items[-4:] == ["function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output"]
    assert [i["role"] for i in body["input"] if i["type"] == "message"] == ["developer", "developer", "user", "user"]


def test_codexs_request_reads_into_callable_tools_and_alternating_turns():
    ask = responses_ask(recorded()["body"], 32768)
    names = [t["function"]["name"] for t in ask.call.options.tools]
    assert "apply_patch" in names and "multi_agent_v1__spawn_agent" in names and "web_search" not in names
    patch = next(t["function"] for t in ask.call.options.tools if t["function"]["name"] == "apply_patch")
    assert patch["parameters"]["properties"] == {"input": {"type": "string"}} and "lark" in patch["description"]
    assert ask.tools.called("multi_agent_v1__spawn_agent").namespace == "multi_agent_v1"
    assert [t["type"] for t in ask.echo["tools"]] == [t["type"] for t in recorded()["body"]["tools"]]
    messages = ask.messages([])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert messages[1]["content"].startswith("<environment_context>") and messages[1]["content"].endswith("say hi")
    patched = messages[4]["tool_calls"][0]["function"]
    assert patched["name"] == "apply_patch" and json.loads(patched["arguments"])["input"].startswith("*** Begin Patch")
    assert ask.store is False


# --- the recorded request, answered ---------------------------------------------------------------------------------
def test_the_recorded_codex_request_is_answered_with_a_valid_event_stream(api):
    from openai.types.responses import Response, ResponseStreamEvent

    record = recorded()
    body = {**record["body"], "model": "tiny-edges", "max_output_tokens": 16}
    headers = {k: v for k, v in record["headers"].items() if k != "content-type"}
    with api.http("dummy") as http, http.stream("POST", record["path"], json=body, headers=headers) as response:
        assert response.status_code == 200, response.read()
        data = stream_events(response)
    adapter = pydantic.TypeAdapter(ResponseStreamEvent)
    events = [adapter.validate_python(d) for d in data]
    assert [e.type for e in events][:2] == ["response.created", "response.in_progress"]
    assert events[-1].type in ("response.completed", "response.incomplete")
    final = Response.model_validate(data[-1]["response"])
    assert final.store is False and final.prompt_cache_key == body["prompt_cache_key"] and final.usage.input_tokens
    assert [t.type for t in final.tools] == [t["type"] for t in body["tools"]]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = api.finished_records("responses")[-1]
    assert done.status == 200 and done.model == "tiny-edges" and done.prompt_tokens == final.usage.input_tokens
    with api.http() as http:  # store: false: nothing to fetch again
        assert http.get(f"/v1/responses/{final.id}").status_code == 404


# --- custom tools -----------------------------------------------------------------------------------------------------
def test_a_custom_tool_call_comes_back_as_a_custom_tool_call_with_its_input(api):
    response = api.openai().responses.create(model="tiny-tools", input="patch it", tools=[PATCH],
                                             max_output_tokens=400, extra_body=PATCH_CALL)  # fmt: skip
    [call] = [i for i in response.output if i.type == "custom_tool_call"]
    assert call.name == "apply_patch" and call.call_id and call.id.startswith("ctc_")
    assert call.input == "*** Begin Patch\n" and response.status == "completed"
    assert response.tools[0].type == "custom" and response.tools[0].format.type == "grammar"


def test_a_custom_tool_choice_forces_its_function():
    body = {"model": "m", "input": "x", "tools": [PATCH, CRM], "tool_choice": {"type": "custom", "name": "apply_patch"}}
    ask = responses_ask(body, 1024)
    assert ask.call.options.tool_choice == {"type": "function", "function": {"name": "apply_patch"}}
    assert ask.echo["tool_choice"] == body["tool_choice"]
    inside = responses_ask({**body, "tool_choice": {"type": "function", "name": "lookup", "namespace": "crm"}}, 1024)
    assert inside.call.options.tool_choice == {"type": "function", "function": {"name": "crm__lookup"}}
    allowed = responses_ask({**body, "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [
        {"type": "custom", "name": "apply_patch"}, {"type": "web_search"}]}}, 1024)  # fmt: skip
    assert [t["function"]["name"] for t in allowed.call.options.tools] == ["apply_patch"]


def test_a_streamed_custom_tool_call_sends_its_input_in_events_the_sdk_reads(api):
    with api.openai().responses.stream(model="tiny-tools", input="patch it", tools=[PATCH], max_output_tokens=400,
                                       extra_body=PATCH_CALL) as stream:  # fmt: skip
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    added = next(e for e in events if e.type == "response.output_item.added" and e.item.type == "custom_tool_call")
    assert added.item.input == "" and "response.function_call_arguments.delta" not in kinds
    done = next(e for e in events if e.type == "response.custom_tool_call_input.done")
    deltas = "".join(e.delta for e in events if e.type == "response.custom_tool_call_input.delta")
    assert done.input == deltas and done.item_id == added.item.id
    assert kinds.index("response.custom_tool_call_input.done") < kinds.index("response.output_item.done")
    [call] = [i for i in final.output if i.type == "custom_tool_call"]
    assert call.input == deltas == "*** Begin Patch\n" and call.call_id == added.item.call_id


def test_a_custom_tool_round_trip_sends_the_call_and_its_output_back(api):
    client = api.openai()
    first = client.responses.create(model="tiny-tools", input="patch it", tools=[PATCH], max_output_tokens=400,
                                    extra_body=PATCH_CALL)  # fmt: skip
    [call] = [i for i in first.output if i.type == "custom_tool_call"]
    result = {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Success. Updated a.txt"}
    again = client.responses.create(model="tiny-tools", tools=[PATCH], max_output_tokens=4, input=[
        {"role": "user", "content": "patch it"}, call.model_dump(exclude_none=True), result])  # fmt: skip
    assert again.output[0].type == "message"
    chained = client.responses.create(model="tiny-tools", tools=[PATCH], max_output_tokens=4,
                                      previous_response_id=first.id, input=[result])  # fmt: skip
    assert chained.usage.input_tokens == again.usage.input_tokens  # the stored call stands in for the sent one
    listed = client.responses.input_items.list(chained.id)
    assert [i.type for i in listed.data] == ["custom_tool_call_output"]


def test_an_image_in_a_tool_output_is_left_out_as_a_line_not_refused(api):
    call = {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}", "namespace": "crm"}
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
    response = api.openai().responses.create(model="tiny-tools", tools=[CRM], max_output_tokens=2, input=[
        {"role": "user", "content": "look"}, call,
        {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "a"}, image]},
    ])  # fmt: skip
    assert response.status in ("completed", "incomplete") and response.usage.input_tokens > 0


# --- namespaces and built-in tools ------------------------------------------------------------------------------------
def test_a_namespaced_function_is_called_by_its_own_name_with_its_namespace(api):
    client = api.openai()
    response = client.responses.create(model="tiny-tools", input="who is 7?", tools=[CRM], max_output_tokens=400,
                                       extra_body=LOOKUP_CALL)  # fmt: skip
    [call] = [i for i in response.output if i.type == "function_call"]
    assert (call.name, call.namespace, json.loads(call.arguments)) == ("lookup", "crm", {"id": 7})
    assert response.tools[0].type == "namespace" and response.tools[0].tools[0].name == "lookup"
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "Ada"}
    again = client.responses.create(model="tiny-tools", tools=[CRM], max_output_tokens=2, input=[
        {"role": "user", "content": "who is 7?"}, call.model_dump(exclude_none=True), result])  # fmt: skip
    assert again.output[0].type == "message"
    named = client.responses.create(model="tiny-tools", input="who?", tools=[CRM], max_output_tokens=200,
                                    tool_choice={"type": "function", "name": "crm__lookup"})  # fmt: skip
    assert [(i.name, i.namespace) for i in named.output if i.type == "function_call"] == [("lookup", "crm")]


def test_built_in_tools_are_not_shown_to_the_model_and_logged_once(api, caplog):
    caplog.set_level(logging.INFO, logger="app.services.api")
    client = api.openai()
    tools = [{"type": "file_search", "vector_store_ids": ["vs_1"]}, {"type": "code_interpreter",
             "container": {"type": "auto"}}, {"type": "image_generation"}, {"type": "local_shell"}]  # fmt: skip
    plain = client.responses.create(model="tiny-tools", input="hi", max_output_tokens=2)
    for _ in range(2):
        with_built_ins = client.responses.create(model="tiny-tools", input="hi", max_output_tokens=2, tools=tools)
    assert with_built_ins.usage.input_tokens == plain.usage.input_tokens  # the template saw no tools
    assert [t.type for t in with_built_ins.tools] == ["file_search", "code_interpreter", "image_generation",
                                                      "local_shell"]  # fmt: skip
    said = [r.getMessage() for r in caplog.records if "not shown to the model" in r.getMessage()]
    assert len([s for s in said if s.startswith("responses: file_search")]) == 1, said


# --- bad input ------------------------------------------------------------------------------------------------------
FN = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
# fmt: off
BAD = {
    "a forced built-in tool": ({"tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search_preview"}},
                               "tool_choice", "web_search_preview"),
    "required with only built-in tools": ({"tools": [{"type": "web_search"}], "tool_choice": "required"},
                                          "tool_choice", "web_search"),
    "an unknown tool type": ({"tools": [{"type": "telepathy"}]}, "tools[0]", "telepathy"),
    "a custom tool's bad format": ({"tools": [{"type": "custom", "name": "p", "format": {"type": "xml"}}]},
                                   "tools[0].format", "grammar"),
    "a custom tool without a name": ({"tools": [{"type": "custom"}]}, "tools[0].name", "required"),
    "a namespace without tools": ({"tools": [{"type": "namespace", "name": "n", "description": "d", "tools": []}]},
                                  "tools[0].tools", "non-empty"),
    "a built-in tool in a namespace": ({"tools": [{"type": "namespace", "name": "n", "description": "d",
                                                   "tools": [{"type": "web_search"}]}]}, "tools[0].tools[0]", "only"),
    "two tools of one name": ({"tools": [FN, {**FN, "type": "custom"}]}, "tools[1].name", "unique"),
    "a choice of an unknown custom tool": ({"tools": [FN], "tool_choice": {"type": "custom", "name": "f"}},
                                           "tool_choice", "custom tool 'f'"),
    "a custom call without input": ({"input": [{"role": "user", "content": "x"},
                                               {"type": "custom_tool_call", "call_id": "c", "name": "p"}]},
                                    "input[1].input", "string"),
    "a custom output without its call": ({"input": [
        {"role": "user", "content": "x"}, {"type": "custom_tool_call_output", "call_id": "c", "output": "o"}]},
        "input", "custom_tool_call"),
    "a bad namespace on a call": ({"input": [{"role": "user", "content": "x"}, {
        "type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "namespace": 3}]},
        "input[1].namespace", "namespace"),
}
# fmt: on


@pytest.mark.parametrize("change, param, said", BAD.values(), ids=BAD.keys())
def test_bad_tools_and_items_are_400_naming_the_field(api, change, param, said):
    response = api.http().post("/v1/responses", json={"model": "tiny-tools", "input": "hi", **change})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and said in error["message"], error


# --- events, rendered -----------------------------------------------------------------------------------------------
def test_custom_and_namespaced_calls_render_as_the_sdks_types():
    from openai.types.responses import Response, ResponseStreamEvent

    tools = read_tools([PATCH, CRM])
    events = ResponseEvents(ResponseHead("m", {"tools": tools.echo, "tool_choice": "auto",
                                               "parallel_tool_calls": True}, tools=tools))  # fmt: skip
    sent = events.first() + events.outs([
        TextOut("On it."), CallStart(0, "call_p", "apply_patch"), CallArgs(0, '{"input": "*** Begin'),
        CallArgs(0, ' Patch\\n"}'), CallStart(1, "call_l", "crm__lookup"), CallArgs(1, '{"id": 7}'),
    ]) + events.last("tool_calls", None, 0)  # fmt: skip
    adapter = pydantic.TypeAdapter(ResponseStreamEvent)
    for event in sent:
        adapter.validate_python(event)
    final = Response.model_validate(sent[-1]["response"])
    text, patch, lookup = final.output
    assert text.type == "message" and text.content[0].text == "On it."
    assert patch.type == "custom_tool_call" and patch.input == "*** Begin Patch\n" and patch.name == "apply_patch"
    assert (lookup.type, lookup.name, lookup.namespace, lookup.arguments) == ("function_call", "lookup", "crm",
                                                                              '{"id": 7}')  # fmt: skip
    done = [e for e in sent if e["type"] == "response.function_call_arguments.done"]
    assert [e["name"] for e in done] == ["lookup"]


# --- the real Codex ---------------------------------------------------------------------------------------------------
CODEX = "@openai/codex"


def _npm_env() -> dict[str, str]:
    """npm's own cache (the user's, found before HOME changes), offline: the probe and the run never wait on the
    network."""
    env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_offline": "true"}
    try:
        cache = subprocess.run(["npm", "config", "get", "cache"], capture_output=True, text=True, timeout=60,
                               check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return env
    return {**env, "npm_config_cache": cache} if cache else env


def codex_or_skip() -> tuple[list[str], dict[str, str]]:
    """The command that runs Codex and its environment: ``codex`` on PATH, or the package from npm's cache."""
    if found := shutil.which("codex"):
        return [found], dict(os.environ)
    if shutil.which("npx") is None or shutil.which("npm") is None:
        pytest.skip(f"Codex is not installed and there is no npx: install Node.js, then: npm install -g {CODEX}")
    command, env = ["npx", "-y", CODEX], _npm_env()
    try:
        probe = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=120, env=env,
                               stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.skip(f"'npx {CODEX} --version' did not answer in 120 s")
    if probe.returncode != 0 or "codex-cli" not in probe.stdout:
        pytest.skip(f"Codex is not on PATH nor in npm's cache (install it: npm install -g {CODEX}): "
                    f"{(probe.stderr or probe.stdout).strip()[-200:]}")  # fmt: skip
    return command, env


def codex_args(url: str, model: str, n_ctx: int) -> list[str]:
    """What ``launch codex`` passes: a provider pointed at the server (Responses API, a placeholder key from
    LLMW_API_KEY), the model and its context, as ``-c`` overrides that leave the user's config.toml alone."""
    provider = f'{{name = "LLM Workstation", base_url = "{url}/v1", env_key = "LLMW_API_KEY", wire_api = "responses"}}'
    return ["-m", model, "-c", "model_provider=llm-workstation", "-c", f"model_providers.llm-workstation={provider}",
            "-c", f"model_context_window={n_ctx}"]  # fmt: skip


@pytest.mark.codex
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_codex_runs_a_turn_headless_against_the_starter_model(tmp_path):
    from app.services import starter_model

    command, env = codex_or_skip()
    if not starter_model.package_installed():
        pytest.skip(f"the starter model is not installed: {starter_model.INSTALL_HINT}")
    models = tmp_path / "models"
    starter_model.ensure_starter_model(models)
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    n_ctx = 16384
    with ApiHarness(models, ServerConfig(port=0, n_ctx=n_ctx), settings_file=tmp_path / "settings.json") as api:
        name = api.openai().models.list().data[0].id
        run = subprocess.run(
            [*command, "exec", "--skip-git-repo-check", "--ephemeral", "-s", "read-only", "-c", "approval_policy=never",
             *codex_args(api.url, name, n_ctx), "say hi"],
            capture_output=True, text=True, timeout=1700, stdin=subprocess.DEVNULL, cwd=work,
            env={**env, "HOME": str(home), "CODEX_HOME": str(home / ".codex"), "LLMW_API_KEY": "dummy"},
        )  # fmt: skip
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
        exchange = [r for r in api.finished_records("responses") if r.model == name]
    assert run.stdout.strip(), run.stderr[-2000:]  # the model's answer
    assert exchange and all(r.status == 200 for r in exchange), exchange
    assert max(r.prompt_tokens or 0 for r in exchange) > 5_000  # Codex's whole prompt reached the model
