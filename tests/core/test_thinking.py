"""Thinking models in the core: which switches a chat template offers (read with jinja2.meta), what a choice becomes
as template variables, whether the prompt opens the thinking block, and one reply's thinking and answer split from
recorded streams of each engine style (llama.cpp's raw text with tags, vLLM's reasoning SSE, Ollama's thinking
NDJSON) by the one reply reader, with the thinking's own duration and token count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.backends.openai_stream import Reply, absorb_delta, sse_data
from app.backends.protocol import Delta
from app.core import safe_json
from app.core.chat.reply_parser import ReplyParser
from app.core.chat.reply_reader import RecastOut, ReplyReader, TextOut, ThinkingOut
from app.core.chat.thinking import (
    ThinkingChoice,
    ThinkingControls,
    prompt_opens_thinking,
    render_template,
    template_variables,
    thinking_controls,
)
from app.core.chat.tool_formats import THINK_TAGS, THINKING_TAGS, ReplyConfig, ReplyFormat, reply_format_for

DATA = Path(__file__).resolve().parents[1] / "data"
STREAMS, REPLIES = DATA / "streams", DATA / "replies"

# The generation-prompt parts of real templates (Qwen3, DeepSeek-V3.1, gpt-oss, QwQ), as they switch thinking.
QWEN3 = (
    "{% for message in messages %}{{ '<|im_start|>' + message.role + '\\n' }}"
    "{% if message.role == 'assistant' and message.reasoning_content is string %}"
    "{{ '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' }}{% endif %}"
    "{{ message.content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}"
    "{% endif %}"
)
DEEPSEEK_V31 = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}<｜User｜>{{ m['content'] }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<｜Assistant｜>"
    "{% if thinking is defined and thinking %}<think>{% else %}</think>{% endif %}{% endif %}"
)
GPT_OSS = (
    "<|start|>system<|message|>Reasoning: {{ reasoning_effort | default('medium') }}<|end|>"
    "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
QWQ = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# --- switches in the template -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (QWEN3, ThinkingControls(toggle="enable_thinking", reads_history=True)),
        (DEEPSEEK_V31, ThinkingControls(toggle="thinking")),
        (GPT_OSS, ThinkingControls(effort="reasoning_effort")),
        (QWQ, ThinkingControls()),
        (CHATML, ThinkingControls()),
        ("{% generation %}{{ enable_thinking }}{% endgeneration %}", ThinkingControls(toggle="enable_thinking")),
        ("{% if enable_thinking %}", ThinkingControls()),  # does not parse: no switches offered
        (None, ThinkingControls()),
    ],
)
def test_switches_are_read_from_the_template(template, expected):
    assert thinking_controls(template) == expected
    assert thinking_controls(template).any == bool(expected.toggle or expected.effort)


def test_a_variable_the_template_sets_itself_is_no_switch():
    assert thinking_controls("{% set enable_thinking = true %}{{ enable_thinking }}") == ThinkingControls()


def test_a_choice_becomes_only_the_variables_the_template_reads():
    qwen, gpt = thinking_controls(QWEN3), thinking_controls(GPT_OSS)
    assert template_variables(qwen, ThinkingChoice(False, "high")) == {"enable_thinking": False}
    assert template_variables(gpt, ThinkingChoice(False, "high")) == {"reasoning_effort": "high"}
    assert template_variables(qwen, ThinkingChoice()) == {}
    assert not ThinkingChoice().chosen and ThinkingChoice(effort="low").chosen


def test_rendering_passes_the_switches_to_the_template():
    hi = [{"role": "user", "content": "Hi"}]
    assert render_template(QWEN3, hi, {}).endswith("<|im_start|>assistant\n")
    assert render_template(QWEN3, hi, {"enable_thinking": False}).endswith("<think>\n\n</think>\n\n")
    assert "Reasoning: high" in render_template(GPT_OSS, hi, {"reasoning_effort": "high"})
    assert "Reasoning: medium" in render_template(GPT_OSS, hi, {})
    history = [*hi, {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."}]
    assert "<think>\nGreet back.\n</think>\n\nHello!" in render_template(QWEN3, history, {})


@pytest.mark.parametrize(
    ("template", "variables", "opens"),
    [
        (QWQ, {}, True),
        (QWEN3, {}, False),
        (QWEN3, {"enable_thinking": False}, False),
        (DEEPSEEK_V31, {"thinking": True}, True),
        (DEEPSEEK_V31, {"thinking": False}, False),
        ("{{ raise_exception('no') }}", {}, None),
    ],
)
def test_whether_the_prompt_opens_the_thinking_block(template, variables, opens):
    assert prompt_opens_thinking(template, THINK_TAGS, variables) is opens


def test_tag_variants_are_recognised_from_the_template():
    config = reply_format_for("{{ '<thinking>' }}{{ messages }}")
    assert config.think == THINKING_TAGS
    split = ReplyReader(ReplyParser(config))
    split.feed(Delta("<thinking>plan</thinking>answer"))
    split.finish()
    assert (split.thinking, split.content) == ("plan", "answer")


# --- recorded streams, each engine style ------------------------------------------------------------------------
class Clock:
    """A clock the test moves: 100 ms a piece."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def vllm_pieces(name: str) -> list[tuple[str, str]]:
    """(text, reasoning) of each chunk of a recorded vLLM stream, read as the vLLM backend reads it."""
    reply, pieces = Reply(sent_at=0.0), []
    for line in (STREAMS / name).read_text("utf-8").splitlines():
        data = sse_data(line)
        if data is None or data == "[DONE]":
            continue
        delta = absorb_delta(reply, safe_json.loads(data, what="a chunk"))
        if delta is not None:
            pieces.append((delta.text, delta.reasoning))
    return pieces


def ollama_pieces(name: str) -> list[tuple[str, str]]:
    """(content, thinking) of each line of a recorded Ollama /api/chat stream."""
    lines = [json.loads(line) for line in (STREAMS / name).read_text("utf-8").splitlines()]
    return [(m["message"].get("content", ""), m["message"].get("thinking", "")) for m in lines if not m["done"]]


def split_all(pieces: list[tuple[str, str]], config: ReplyConfig | None = None) -> ReplyReader:
    clock = Clock()
    split = ReplyReader(ReplyParser(config or ReplyConfig(ReplyFormat.NONE)), clock=clock)
    for text, reasoning in pieces:
        clock.now += 0.1
        split.feed(Delta(text, reasoning=reasoning))
    clock.now += 0.1
    split.finish()
    return split


@pytest.mark.parametrize("name", ["vllm_reasoning_content.sse", "vllm_reasoning.sse"])
def test_vllm_reasoning_stream(name):
    pieces = vllm_pieces(name)
    split = split_all(pieces)
    assert split.thinking == "Okay, the user asks 2+2. That is 4."
    assert split.content == "2 + 2 = **4**."
    assert split.thinking_tokens == 13
    assert split.thinking_ms == pytest.approx(1400)  # from the first thinking piece to the answer's first (not "\n\n")


def test_ollama_thinking_stream():
    split = split_all(ollama_pieces("ollama_thinking.ndjson"))
    assert (split.thinking, split.content) == ("Okay, the user asks 2+2. That is 4.", "2 + 2 = **4**.")
    assert split.thinking_tokens == 13


def test_llamacpp_raw_text_with_tags_one_token_a_piece():
    text = (REPLIES / "qwen3_think_answer.txt").read_text("utf-8")
    split = split_all([(char, "") for char in text])
    whole = split_all([(text, "")])
    assert (split.thinking, split.content) == (whole.thinking, whole.content)
    assert split.thinking and split.content and "<think>" not in split.content + split.thinking


def test_missing_opening_tag_recasts_what_came_before_as_thinking():
    text = (REPLIES / "deepseek_r1_prompt_opened.txt").read_text("utf-8")
    pieces = [(text[i : i + 3], "") for i in range(0, len(text), 3)]
    events = []
    split = ReplyReader(ReplyParser(ReplyConfig(ReplyFormat.NONE)), clock=Clock())
    for piece, _ in pieces:
        events += split.feed(Delta(piece))
    events += split.finish()
    recast = [e for e in events if isinstance(e, RecastOut)]
    assert len(recast) == 1 and recast[0].thinking == split.thinking
    assert split.thinking.startswith("Okay, so I need") and split.content.startswith('The word **"strawberry"**')
    assert split.thinking_tokens > 50  # the pieces shown as answer until the tag came are counted as thinking


def test_thinking_that_never_closes_is_all_thinking_and_timed_to_the_end():
    config = ReplyConfig(ReplyFormat.NONE, THINK_TAGS, prompt_opens_think=True)
    split = split_all([("Let", ""), (" me", ""), (" think", "")], config)
    assert (split.thinking, split.content, split.thinking_tokens) == ("Let me think", "", 3)
    assert split.thinking_ms == pytest.approx(300)  # to the end of the reply
    assert split_all([("<think>", ""), ("hm", "")]).thinking == "hm"


def test_no_thinking_no_figures():
    split = split_all([("Hello", ""), (" there", "")])
    assert (split.thinking, split.content, split.thinking_tokens, split.thinking_ms) == ("", "Hello there", 0, None)


def test_engine_reasoning_and_tags_in_one_piece_keep_their_order():
    split = ReplyReader(ReplyParser(ReplyConfig(ReplyFormat.NONE)), clock=Clock())
    events = split.feed(Delta("Answer", reasoning="thought"))
    assert events == [ThinkingOut("thought"), TextOut("Answer")]
