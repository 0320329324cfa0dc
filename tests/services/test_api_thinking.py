"""The API server and a thinking model on the real llama.cpp worker: a client's switches (OpenAI's
``reasoning_effort`` and ``chat_template_kwargs``, Anthropic's ``thinking.type``) reach the GGUF's template, the
thinking comes back apart (``reasoning_content``, thinking blocks), never copied into ``content``."""

from __future__ import annotations

import openai
import pytest

from app.services.api.config import ServerConfig
from tests.backends.test_thinking_engines import FORCED, THINK_TEMPLATE
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(180)

HI = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-think")
    write_tiny_gguf(folder / "tiny-think.gguf", name="tiny-think", chat_template=THINK_TEMPLATE)
    with ApiHarness(folder, ServerConfig(port=0)) as harness:
        yield harness


def _ask(api, grammar=FORCED, **extra):
    return api.openai().chat.completions.create(model="tiny-think", messages=HI, max_tokens=40,
                                                extra_body={"grammar": grammar, **extra})  # fmt: skip


def test_openai_switches_reach_the_template(api):
    default = _ask(api)
    effort = _ask(api, reasoning_effort="high")
    off = _ask(api, chat_template_kwargs={"enable_thinking": False})
    none = _ask(api, reasoning_effort="none")  # OpenAI's "no reasoning": thinking off
    assert effort.usage.prompt_tokens > default.usage.prompt_tokens
    assert off.usage.prompt_tokens > default.usage.prompt_tokens
    assert none.usage.prompt_tokens == off.usage.prompt_tokens
    for reply in (default, effort, off):
        message = reply.choices[0].message
        assert (message.content, message.model_extra["reasoning_content"]) == ("Yes", "Let me see")


def test_streamed_thinking_comes_as_reasoning_content(api):
    chunks = list(api.openai().chat.completions.create(
        model="tiny-think", messages=HI, max_tokens=40, stream=True, extra_body={"grammar": FORCED}))  # fmt: skip
    thinking = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks
                       if c.choices)  # fmt: skip
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert (thinking, content) == ("Let me see", "Yes")


def test_a_reply_that_is_all_thinking_has_no_answer_as_the_chat_shows_it(api):
    """The one reply reader's rule (``app.core.chat.reply_reader``): thinking is never copied into the answer, as
    vLLM, llama.cpp's server and OpenAI's reasoning models answer; the chat shows the same reply the same way."""
    reply = _ask(api, grammar='root ::= "Let me see more"')
    message = reply.choices[0].message
    assert message.model_extra["reasoning_content"] == "Let me see more"
    assert message.content == ""
    cut = api.openai().chat.completions.create(model="tiny-think", messages=HI, max_tokens=6,
                                               extra_body={"grammar": 'root ::= "Let me see" [a-z ]*'})  # fmt: skip
    assert cut.choices[0].finish_reason == "length" and cut.choices[0].message.content == ""


def test_anthropic_thinking_type_switches_thinking(api):
    def ask(kind):
        return api.anthropic().messages.create(model="tiny-think", max_tokens=40, messages=HI,
                                               thinking={"type": kind, **({"budget_tokens": 1024} if kind ==
                                                                          "enabled" else {})},
                                               extra_body={"grammar": FORCED})  # fmt: skip

    enabled, disabled = ask("enabled"), ask("disabled")
    assert disabled.usage.input_tokens > enabled.usage.input_tokens
    assert [b.type for b in enabled.content] == ["thinking", "text"] and enabled.content[0].thinking == "Let me see"
    assert [b.type for b in disabled.content] == ["text"] and disabled.content[0].text == "Yes"


def test_a_bad_switch_is_a_400_naming_it(api):
    with pytest.raises(openai.BadRequestError) as caught:
        _ask(api, reasoning_effort="extreme")
    assert "reasoning_effort must be one of low, medium, high" in str(caught.value)
    assert caught.value.body["param"] == "reasoning_effort"
    with pytest.raises(openai.BadRequestError, match=r"chat_template_kwargs\.enable_thinking"):
        _ask(api, chat_template_kwargs={"enable_thinking": "no"})


def test_earlier_thinking_a_client_sends_back_reaches_a_template_that_reads_it(api):
    turn = [*HI, {"role": "assistant", "content": "Yes"}, {"role": "user", "content": "why?"}]
    plain = api.openai().chat.completions.create(model="tiny-think", messages=turn, max_tokens=1)
    turn[1] = {**turn[1], "reasoning_content": "Let me see"}
    thought = api.openai().chat.completions.create(model="tiny-think", messages=turn, max_tokens=1)
    assert thought.usage.prompt_tokens > plain.usage.prompt_tokens
