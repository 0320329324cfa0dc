"""Thinking through each engine: the real llama.cpp worker on a generated GGUF whose template opens ``<think>`` when
thinking is on (random weights never think on their own: a grammar forces the closing tag), Ollama's ``think`` and
``thinking`` against the fake server, and vLLM's request fields and reasoning deltas."""

from __future__ import annotations

import asyncio

import pytest

from app.backends.ollama import OllamaBackend
from app.backends.openai_stream import request_body
from app.backends.protocol import GenerationError
from app.core.chat.reply_parser import parse_reply
from app.core.chat.thinking import prompt_opens_thinking
from app.core.chat.tool_formats import THINK_TAGS, ReplyConfig, ReplyFormat
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from tests.backends.test_llamacpp_options import TOOLS, Worker
from tests.support.fake_ollama import FakeOllama
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(120)

# A Qwen3-like template: the generation prompt opens <think> unless thinking is switched off (then it writes an
# empty block, as Qwen3 does); an effort goes into a system line; earlier thinking is shown from reasoning_content.
THINK_TEMPLATE = (
    "{% if reasoning_effort is defined %}<|im_start|>system\nReasoning: {{ reasoning_effort }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)
USER = [{"role": "user", "content": "hello there"}]
FORCED = 'root ::= "Let me see" "</think>" "Yes"'  # what a thinking model writes after the prompt's <think>


@pytest.fixture(scope="module")
def worker():
    held = Worker()
    yield held
    held.close()


@pytest.fixture(scope="module")
def think_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("think") / "tiny-think.gguf", chat_template=THINK_TEMPLATE,
                           name="tiny-think")  # fmt: skip


async def _reply(backend, options, messages=USER, max_tokens=40):
    deltas = [d async for d in backend.stream_chat(messages, SamplingParams(max_tokens=max_tokens), options)]
    return "".join(d.text for d in deltas), backend.stats()


def test_switches_reach_the_template_through_the_real_worker(worker, think_gguf):
    backend = worker.load(think_gguf)
    text, default = worker.run(_reply(backend, GenerationOptions(grammar=FORCED)))
    _, on = worker.run(_reply(backend, GenerationOptions(grammar=FORCED, enable_thinking=True)))
    _, off = worker.run(_reply(backend, GenerationOptions(grammar=FORCED, enable_thinking=False)))
    _, effort = worker.run(_reply(backend, GenerationOptions(grammar=FORCED, reasoning_effort="high")))
    assert text == "Let me see</think>Yes"
    assert on.prompt_tokens == default.prompt_tokens  # the template's default is thinking on
    assert off.prompt_tokens > on.prompt_tokens  # "<think>\n\n</think>\n\n" instead of "<think>\n"
    assert effort.prompt_tokens > default.prompt_tokens  # the "Reasoning: high" system line


def test_the_forced_reply_reads_as_thinking_then_answer(worker, think_gguf):
    backend = worker.load(think_gguf)
    text, _ = worker.run(_reply(backend, GenerationOptions(grammar=FORCED, enable_thinking=True)))
    opens = prompt_opens_thinking(THINK_TEMPLATE, THINK_TAGS, {"enable_thinking": True})
    assert opens is True and prompt_opens_thinking(THINK_TEMPLATE, THINK_TAGS, {"enable_thinking": False}) is False
    reply = parse_reply(text, ReplyConfig(ReplyFormat.NONE, THINK_TAGS, prompt_opens_think=opens))
    assert (reply.thinking, reply.content, reply.stray_think_close) == ("Let me see", "Yes", False)
    # read without knowing that the prompt opened it, the closing tag alone still makes what came before thinking
    blind = parse_reply(text, ReplyConfig(ReplyFormat.NONE))
    assert (blind.thinking, blind.content) == ("Let me see", "Yes")


def test_earlier_thinking_reaches_a_template_that_reads_it(worker, think_gguf):
    backend = worker.load(think_gguf)
    plain = [*USER, {"role": "assistant", "content": "Yes"}, {"role": "user", "content": "and then?"}]
    thought = [*USER, {"role": "assistant", "content": "Yes", "reasoning_content": "Let me see"}, plain[-1]]
    assert worker.run(backend.count_tokens(thought)) > worker.run(backend.count_tokens(plain))


def test_tools_still_work_with_thinking_switched_off(worker, think_gguf):
    backend = worker.load(think_gguf)
    options = GenerationOptions(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}},
                                enable_thinking=False)  # fmt: skip
    text, stats = worker.run(_reply(backend, options, max_tokens=200))
    reply = parse_reply(text, ReplyConfig(ReplyFormat.HERMES, THINK_TAGS))
    assert [c.name for c in reply.tool_calls] == ["get_time"] and stats.finish_reason != "length"


def test_a_template_without_switches_renders_as_before(worker, tiny_gguf):
    backend = worker.load(tiny_gguf)
    _, plain = worker.run(_reply(backend, None, max_tokens=1))
    switches = GenerationOptions(enable_thinking=False, reasoning_effort="low")
    _, asked = worker.run(_reply(backend, switches, max_tokens=1))
    assert asked.prompt_tokens == plain.prompt_tokens


# --- vLLM: the request fields -----------------------------------------------------------------------------------
def test_vllm_is_sent_the_switches_as_it_takes_them():
    off = request_body("m", USER, SamplingParams(), GenerationOptions(enable_thinking=False, reasoning_effort="low"))
    assert off["chat_template_kwargs"] == {"enable_thinking": False, "thinking": False}
    assert off["reasoning_effort"] == "low"
    plain = request_body("m", USER, SamplingParams(), GenerationOptions())
    assert "chat_template_kwargs" not in plain and "reasoning_effort" not in plain


# --- Ollama: think and thinking ---------------------------------------------------------------------------------
def _ollama_reply(fake, name, options):
    async def scenario():
        backend = OllamaBackend(fake.host)
        try:
            await backend.load(name, LoadParams(n_ctx=2048))
            return [d async for d in backend.stream_chat(USER, SamplingParams(seed=1), options)]
        finally:
            await backend.close()

    return asyncio.run(asyncio.wait_for(scenario(), 10))


def test_ollama_thinking_comes_apart_and_think_is_sent():
    with FakeOllama() as fake:
        fake.add_model("qwen3", capabilities=["completion", "thinking"])
        fake.add_model("llama3.2")
        fake.thinking = ["Hmm", ",", " a", " greeting", "."]
        deltas = _ollama_reply(fake, "qwen3", None)
        assert "".join(d.reasoning for d in deltas) == "Hmm, a greeting."
        assert "".join(d.text for d in deltas) == "You said: hello there"
        deltas = _ollama_reply(fake, "qwen3", GenerationOptions(enable_thinking=False))
        assert not any(d.reasoning for d in deltas)
        assert fake.requests_to("/api/chat")[-1].json["think"] is False
        _ollama_reply(fake, "qwen3", GenerationOptions(reasoning_effort="high"))
        assert fake.requests_to("/api/chat")[-1].json["think"] == "high"
        with pytest.raises(GenerationError, match="does not support thinking"):
            _ollama_reply(fake, "llama3.2", GenerationOptions(enable_thinking=True))
        assert "think" not in fake.requests_to("/api/chat")[1].json  # nothing asked, nothing sent


def test_ollama_is_sent_earlier_thinking_as_its_own_field():
    from app.backends.ollama_fields import ollama_messages

    history = [*USER, {"role": "assistant", "content": "Hi!", "reasoning_content": "A greeting."}]
    assert ollama_messages(history)[1] == {"role": "assistant", "content": "Hi!", "thinking": "A greeting."}
