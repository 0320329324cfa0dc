"""A thinking model in the chat, through the real llama.cpp worker and a real SQLite history: the reply's thinking is
kept apart from its answer (never inside ``content``), with its own duration and token count, told to the page as it
streams; switching thinking off reaches the template; the choice is remembered per model."""

from __future__ import annotations

import asyncio

import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.chat.conversation import Conversation, Message, MessageStatus, ReplyStats, Role
from app.core.chat.thinking import ThinkingChoice
from app.core.params import LoadParams, SamplingParams
from app.services.chat.history import AsyncConversationStore
from app.services.chat.session import ChatObserver, ChatSession
from app.services.engines.host import EngineHost
from app.services.model_settings import ModelSettings, ModelSettingsStore
from tests.backends.test_thinking_engines import THINK_TEMPLATE
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(120)


class Recorder(ChatObserver):
    def __init__(self) -> None:
        self.answer: list[str] = []
        self.thinking: list[str] = []

    def reply_delta(self, text: str) -> None:
        self.answer.append(text)

    def reply_thinking(self, text: str) -> None:
        self.thinking.append(text)


@pytest.fixture(scope="module")
def think_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("chat-think") / "tiny-think.gguf"
    return write_tiny_gguf(path, chat_template=THINK_TEMPLATE, name="tiny-think", never_eos=True)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


async def _chat(tmp_path, model, choice: ThinkingChoice, *texts: str):
    store = await AsyncConversationStore.open(tmp_path / "chats.sqlite3")
    host = EngineHost(LlamaCppBackend())
    try:
        await host.load(str(model), LoadParams(n_ctx=1024))
        recorder = Recorder()
        session = ChatSession(store, host, lambda: SamplingParams(max_tokens=24, temperature=0.0), recorder)
        session.thinking = lambda: choice
        replies = [await session.send(text) for text in texts]
        assert session.conversation is not None and session.conversation.id is not None
        stored = await store.load(session.conversation.id)
        return replies, stored, recorder
    finally:
        await host.close()
        await store.aclose()


def test_thinking_is_kept_apart_with_its_own_figures(tmp_path, think_gguf):
    """The template opens <think> and random weights never close it: the whole reply is thinking."""
    (reply,), stored, recorder = run(_chat(tmp_path, think_gguf, ThinkingChoice(True), "hello there"))
    assert reply.status is MessageStatus.COMPLETE and reply.stats is not None
    assert reply.reasoning and reply.content == "" and "<think>" not in reply.reasoning
    assert "".join(recorder.thinking).strip() == reply.reasoning and not recorder.answer
    stats = reply.stats
    assert stats.completion_tokens == 24 and 20 <= stats.thinking_tokens <= 24
    assert stats.thinking_ms is not None and 0 < stats.thinking_ms <= stats.total_ms
    saved = stored.messages[-1]
    assert (saved.reasoning, saved.content, saved.stats.thinking_tokens) == (reply.reasoning, "", stats.thinking_tokens)


def test_thinking_switched_off_reaches_the_template(tmp_path, think_gguf):
    (reply,), _stored, recorder = run(_chat(tmp_path, think_gguf, ThinkingChoice(False), "hello there"))
    assert reply.content and reply.reasoning == "" and not recorder.thinking
    assert reply.stats.thinking_tokens == 0 and reply.stats.thinking_ms is None
    (on,), _, _ = run(_chat(tmp_path / "on", think_gguf, ThinkingChoice(True), "hello there"))
    assert reply.stats.prompt_tokens > on.stats.prompt_tokens  # "<think>\n\n</think>\n\n" rather than "<think>\n"


def test_history_sends_thinking_apart_for_the_template_to_decide():
    conversation = Conversation(messages=[
        Message(Role.USER, "2+2?"), Message(Role.ASSISTANT, "4", reasoning="Add them."),
        Message(Role.USER, "and 3+3?"),
    ])  # fmt: skip
    assert conversation.prompt_messages() == [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Add them."},
        {"role": "user", "content": "and 3+3?"},
    ]


def test_the_choice_is_remembered_per_model(tmp_path):
    store = ModelSettingsStore(tmp_path / "model-settings.json")
    store.load()
    store.update("/models/a.gguf", thinking=False, effort="high")
    again = ModelSettingsStore(tmp_path / "model-settings.json")
    again.load()
    assert again.get("/models/a.gguf").thinking_choice == ThinkingChoice(False, "high")
    assert again.get("/models/b.gguf").thinking_choice == ThinkingChoice()
    with pytest.raises(ValueError, match="effort must be one of low, medium, high"):
        ModelSettings.from_dict({"effort": "extreme"})


def test_the_figures_say_how_long_it_thought():
    stats = ReplyStats(completion_tokens=50, prompt_tokens=9, thinking_ms=3240, thinking_tokens=31)
    assert stats.summary().endswith("prompt 9 tokens · thought 3.2 s (31 tokens)")
    assert "thought" not in ReplyStats(completion_tokens=5).summary()
    assert ReplyStats.from_dict(stats.to_dict()) == stats  # kept in the message's stats JSON
