"""Clients of the Responses API run unmodified against the local server: the OpenAI Agents SDK's default model
(``OpenAIResponsesModel``) takes a turn, streamed and not, and calls a function tool; the starter model (a real
model) answers a plain ``responses.create`` with text."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import pytest

from app.services.api.config import ServerConfig
from tests.services.test_api_responses import HERMES_TOOLS_TEMPLATE, literal
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf

agents = pytest.importorskip("agents")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("responses-agents")
    write_tiny_gguf(folder / "tiny-chat.gguf", name="tiny-chat")
    write_tiny_gguf(folder / "tiny-tools.gguf", name="tiny-tools", chat_template=HERMES_TOOLS_TEMPLATE)
    with ApiHarness(folder, ServerConfig(port=0)) as harness:
        yield harness


def _run(api, agent, prompt: str, *, streamed: bool = False):
    """One run of ``agent`` with the SDK's default provider and model, on a client pointed at the server."""
    import openai
    from agents import RunConfig, Runner
    from agents.models.openai_provider import OpenAIProvider

    async def go():
        client = openai.AsyncOpenAI(base_url=api.url + "/v1", api_key="none", max_retries=0, timeout=60)
        config = RunConfig(model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True)
        try:
            if not streamed:
                return await Runner.run(agent, prompt, run_config=config, max_turns=2)
            result = Runner.run_streamed(agent, prompt, run_config=config, max_turns=2)
            result.kinds = [event.type async for event in result.stream_events()]
            return result
        finally:
            await client.close()

    return asyncio.run(go())


def test_the_agents_sdks_default_model_runs_a_turn(api):
    from agents import Agent, ModelSettings
    from agents.models.openai_provider import OpenAIProvider
    from agents.models.openai_responses import OpenAIResponsesModel

    assert isinstance(OpenAIProvider(api_key="none").get_model("tiny-chat"), OpenAIResponsesModel)
    agent = Agent(name="assistant", instructions="Answer briefly.", model="tiny-chat",
                  model_settings=ModelSettings(extra_body=literal("Hello from the local server.")))  # fmt: skip
    result = _run(api, agent, "Say hello.")
    assert result.final_output == "Hello from the local server."
    [response] = result.raw_responses
    assert response.response_id.startswith("resp_") and response.usage.output_tokens > 0
    record = api.finished_records("responses")[-1]
    assert record.status == 200 and record.model == "tiny-chat"


def test_a_streamed_agent_turn_reads_every_event(api):
    from agents import Agent, ModelSettings

    agent = Agent(name="assistant", model="tiny-chat", model_settings=ModelSettings(extra_body=literal("Streamed.")))
    result = _run(api, agent, "Say something.", streamed=True)
    assert result.final_output == "Streamed." and "raw_response_event" in result.kinds
    assert api.finished_records("responses")[-1].stream


def test_an_agent_calls_a_function_tool_and_takes_its_result(api):
    from agents import Agent, ModelSettings, function_tool

    seen: list[str] = []

    @function_tool
    def get_weather(city: Literal["Paris", "Rome"]) -> str:
        """The weather in a city."""
        seen.append(city)
        return f"sunny in {city}"

    agent = Agent(name="weather", model="tiny-tools", tools=[get_weather], tool_use_behavior="stop_on_first_tool",
                  model_settings=ModelSettings(tool_choice="get_weather", max_tokens=120))  # fmt: skip
    result = _run(api, agent, "Weather in Paris?")
    assert len(seen) == 1 and result.final_output == f"sunny in {seen[0]}"
    [response] = result.raw_responses
    [call] = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": seen[0]}


# --- the starter model ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def starter(tmp_path_factory):
    from app.services import starter_model

    pytest.importorskip(starter_model.PACKAGE, reason="the starter model's package is not installed")
    folder = tmp_path_factory.mktemp("starter")
    starter_model.ensure_starter_model(folder)
    with ApiHarness(folder, ServerConfig(port=0)) as harness:
        yield harness


def test_the_starter_model_answers_a_response_with_words(starter):
    client = starter.openai()
    [model] = [m.id for m in client.models.list()]
    response = client.responses.create(model=model, instructions="You are a helpful assistant.",
                                       input="Name three colors.", max_output_tokens=40, temperature=0)  # fmt: skip
    words = [w for w in response.output_text.split() if any(c.isalpha() for c in w)]
    assert response.status in ("completed", "incomplete") and len(words) >= 2, response.output_text
    streamed = list(client.responses.create(model=model, input="Name three colors.", max_output_tokens=40,
                                            temperature=0, stream=True))  # fmt: skip
    assert streamed[-1].response.output_text.strip()
