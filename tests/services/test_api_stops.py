"""Stop strings and logprobs done by the app's token loop (issue 26), through the real server and llama.cpp worker
with the official SDKs: the stop that ended a reply is named (Anthropic's ``stop_sequence``); streamed text never
shows the start of a stop; a preset's stop before the reply's first visible text does not end it (the starter
model answers a plain request with text) while a client's stops are obeyed exactly; chat logprob tokens join to
exactly the content; vLLM's ``stop_reason`` is read as the stop that matched."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from app.backends.openai_stream import Reply, absorb_delta
from app.core.params import SamplingParams
from app.services import starter_model
from app.services.api.config import ServerConfig
from app.services.model_settings import ModelSettings
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(600)


@dataclass(frozen=True)
class Served:
    api: ApiHarness
    model: str


HI = [{"role": "user", "content": "hello there"}]


def gbnf_literal(text: str) -> str:
    return 'root ::= "' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def writes(text: str) -> dict:
    """The reply is exactly ``text`` (a raw grammar, llama-server's extension)."""
    return {"grammar": gbnf_literal(text)}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stop-models")
    write_tiny_gguf(folder / "tiny-chat.gguf", name="tiny-chat")
    write_tiny_gguf(folder / "tiny-preset.gguf", name="tiny-preset")
    with ApiHarness(folder, ServerConfig(port=0), settings_file=folder / "model-settings.json") as harness:
        assert harness.settings is not None  # the preset's stop, as a Modelfile's PARAMETER stop sets it
        harness.settings.set(str(folder / "tiny-preset.gguf"), ModelSettings(sampling=SamplingParams(stop=("\n\n",))))
        yield harness


@pytest.fixture(scope="module")
def starter(tmp_path_factory):
    """The starter model served with its preset (stops ``<end_of_turn>`` and a blank line), as ``serve`` does."""
    pytest.importorskip(starter_model.PACKAGE)
    folder = tmp_path_factory.mktemp("starter")
    starter_model.ensure_starter_model(folder)
    with ApiHarness(folder, ServerConfig(port=0), settings_file=folder / "model-settings.json") as harness:
        yield Served(harness, harness.openai().models.list().data[0].id)


# --- which stop ended the reply -----------------------------------------------------------------------------------
def test_the_stop_that_ended_a_reply_is_named(api):
    message = api.anthropic().messages.create(
        model="tiny-chat", max_tokens=60, messages=HI, stop_sequences=["zz", "cat"],
        extra_body=writes("the cat sat on the mat"),
    )  # fmt: skip
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "cat"
    assert [b.text for b in message.content] == ["the "]
    ended = api.anthropic().messages.create(model="tiny-chat", max_tokens=60, messages=HI,
                                            stop_sequences=["zz"], extra_body=writes("the end"))  # fmt: skip
    assert ended.stop_reason == "end_turn" and ended.stop_sequence is None


def test_streamed_text_never_shows_the_start_of_a_stop(api):
    stream = api.openai().chat.completions.create(
        model="tiny-chat", messages=HI, stream=True, stop=["lo wo", "xyz"], extra_body=writes("hello world")
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(pieces) == "hel"


# --- a preset's stop before the first word; a client's stop exactly ---------------------------------------------
def test_a_presets_stop_before_the_first_word_does_not_end_the_reply(api):
    reply = api.openai().chat.completions.create(
        model="tiny-preset", messages=HI, extra_body=writes("\n\n\nHello there.\n\nAnd more.")
    )
    assert reply.choices[0].message.content == "Hello there." and reply.choices[0].finish_reason == "stop"


def test_a_clients_stop_is_obeyed_where_it_matches(api):
    reply = api.openai().chat.completions.create(
        model="tiny-preset", messages=HI, stop=["\n\n"], extra_body=writes("\n\nHello there.")
    )
    assert reply.choices[0].message.content == "" and reply.choices[0].finish_reason == "stop"


def test_an_anthropic_clients_stop_sequence_is_obeyed_where_it_matches(api):
    reply = api.anthropic().messages.create(
        model="tiny-preset", max_tokens=20, messages=HI, stop_sequences=["\n\n"], extra_body=writes("\n\nHello.")
    )
    assert not "".join(b.text for b in reply.content if b.type == "text").strip()
    assert reply.stop_reason == "stop_sequence" and reply.stop_sequence == "\n\n"


def test_the_starter_model_answers_a_plain_request_with_text(starter):
    client = starter.api.openai().with_options(timeout=300)
    for seed in (0, 2, 3):  # before: "" for each of these (its preset's blank line came first)
        reply = client.chat.completions.create(
            model=starter.model, messages=[{"role": "user", "content": "Say hello."}], seed=seed, logprobs=True
        )
        choice = reply.choices[0]
        assert choice.message.content.strip() and choice.finish_reason == "stop"
        assert "".join(t.token for t in choice.logprobs.content) == choice.message.content


# --- logprobs that spell the content ------------------------------------------------------------------------------
def test_logprob_tokens_join_to_the_content(api):
    ask = dict(model="tiny-chat", messages=HI, logprobs=True, top_logprobs=2, extra_body=writes(" Hello there, friend"))
    reply = api.openai().chat.completions.create(**ask)
    choice = reply.choices[0]
    assert choice.message.content == "Hello there, friend"  # the reply's leading space is dropped
    assert "".join(t.token for t in choice.logprobs.content) == choice.message.content
    assert all(len(t.top_logprobs) == 2 and bytes(t.bytes).decode() == t.token for t in choice.logprobs.content)
    chunks = [c for c in api.openai().chat.completions.create(**ask, stream=True) if c.choices]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    tokens = "".join(t.token for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.content or [])
    assert streamed == tokens == "Hello there, friend"


def test_logprob_tokens_end_where_a_stop_cuts_the_content(api):
    reply = api.openai().chat.completions.create(
        model="tiny-chat", messages=HI, logprobs=True, stop=["ere"], extra_body=writes("Hello there, friend")
    )
    choice = reply.choices[0]
    assert choice.message.content == "Hello th"
    assert "".join(t.token for t in choice.logprobs.content) == "Hello th"


# --- vLLM ---------------------------------------------------------------------------------------------------------
def test_vllms_stop_reason_is_the_stop_that_matched():
    reply = Reply(sent_at=0.0)
    absorb_delta(reply, {"choices": [{"index": 0, "delta": {"content": "the"}, "finish_reason": None}]})
    absorb_delta(reply, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "cat"}]})
    assert reply.stats("stop").stop_sequence == "cat"
    by_token = Reply(sent_at=0.0)  # a stop token id (an int), or the end of text (null): no stop string
    absorb_delta(by_token, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": 128009}]})
    assert by_token.stats("stop").stop_sequence is None
