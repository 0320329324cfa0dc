"""Embeddings from a chat load's own context (``app.backends.llamacpp.chat_embeddings``), driven in-process on the
real llama.cpp: the vectors an embedding load gives, the chat's prompt cache kept across the embedding (the next
chat evaluates one token, not its prompt), the same reply after it, and what cannot be embedded there."""

from __future__ import annotations

import pytest

from app.backends.llamacpp import chat_embeddings
from app.backends.llamacpp.engine import EngineError, LlamaEngine
from app.backends.llamacpp.protocol import ERR_BAD_INPUT, ERR_PROMPT_TOO_LONG
from app.core.params import GenerationOptions, LoadParams, SamplingParams
from tests.support.embedding_gguf import write_embedding_gguf

pytestmark = pytest.mark.timeout(120)

CHAT = [{"role": "user", "content": "Tell me about the cat and the dog by the river."}]
TEXTS = ["the cat sat", "a journey of a thousand miles", "the cat sat"]


class Chatting:
    """A LlamaEngine loaded for chat, with the tokens each of its evaluations took."""

    def __init__(self, path, **params) -> None:
        self.engine = LlamaEngine()
        self.engine.load(str(path), LoadParams(**{"n_ctx": 512, **params}))
        self.evaluated: list[int] = []
        evaluate = self.engine.llm.eval

        def counting_eval(tokens):
            self.evaluated.append(len(tokens))
            return evaluate(tokens)

        self.engine.llm.eval = counting_eval

    def chat(self) -> tuple[str, int]:
        """The reply at temperature 0, and the prompt tokens evaluated for it."""
        pieces: list[str] = []
        self.evaluated.clear()
        sampling = SamplingParams(temperature=0.0, max_tokens=12)
        self.engine.stream_chat(CHAT, sampling, GenerationOptions(), lambda text, _logprobs: pieces.append(text))
        return "".join(pieces), self.evaluated[0]


@pytest.fixture
def chatting(tiny_gguf):
    held = Chatting(tiny_gguf)
    yield held
    held.engine.unload()


def test_a_chat_context_embeds_as_an_embedding_load_does(chatting, tiny_gguf):
    answer = chat_embeddings.embed(chatting.engine, TEXTS)
    loaded = LlamaEngine()
    loaded.load(str(tiny_gguf), LoadParams(n_ctx=512, embedding=True))
    try:
        expected = chat_embeddings.embed(loaded, TEXTS)
    finally:
        loaded.unload()
    first, second, again = answer["vectors"]
    assert [pytest.approx(v, abs=1e-5) for v in expected["vectors"]] == answer["vectors"]
    assert sum(x * x for x in first) == pytest.approx(1.0) and first == pytest.approx(again)
    assert first != pytest.approx(second, abs=1e-3)
    assert answer["tokens"] == expected["tokens"] == sum(len(chatting.engine.llm.tokenize(t.encode())) for t in TEXTS)


def test_the_chat_after_an_embedding_reuses_its_prompt_cache_and_says_the_same(chatting):
    before, prompt = chatting.chat()
    chat_embeddings.embed(chatting.engine, TEXTS)
    after, evaluated = chatting.chat()
    assert after == before and prompt > 10
    assert evaluated == 1  # the cached prompt: only its last token is decoded again for fresh logits


def test_a_cache_too_large_to_keep_is_dropped_and_the_chat_still_answers_the_same(chatting, monkeypatch):
    before, prompt = chatting.chat()
    monkeypatch.setattr(chat_embeddings, "KEEP_CACHE_MAX", 0)
    chat_embeddings.embed(chatting.engine, TEXTS)
    assert chatting.engine.llm.n_tokens == 0
    assert chatting.chat() == (before, prompt)  # evaluated from the start


def test_a_text_longer_than_the_context_is_refused_and_the_chat_cache_survives(chatting):
    before, _ = chatting.chat()
    with pytest.raises(EngineError, match="Split the text") as caught:
        chat_embeddings.embed(chatting.engine, ["hello there " * 400])
    assert caught.value.kind == ERR_PROMPT_TOO_LONG
    assert chatting.chat() == (before, 1)


def test_a_model_that_pools_its_own_vectors_embeds_only_when_loaded_for_embeddings(tmp_path):
    path = write_embedding_gguf(tmp_path / "embed.gguf")
    engine = LlamaEngine()
    engine.load(str(path), LoadParams(n_ctx=512))
    try:
        with pytest.raises(EngineError, match="pools its own vectors") as caught:
            chat_embeddings.embed(engine, ["hello"])
        assert caught.value.kind == ERR_BAD_INPUT
        engine.load(str(path), LoadParams(n_ctx=512, embedding=True))
        answer = chat_embeddings.embed(engine, ["hello", "the cat"])
        assert len(answer["vectors"]) == 2 and len(answer["vectors"][0]) == 64 and answer["tokens"] > 2
    finally:
        engine.unload()


def test_a_stop_left_over_from_an_earlier_reply_does_not_abort_an_embedding(chatting):
    chatting.chat()
    chatting.engine.request_stop()  # what a Stop that came after its reply had ended leaves behind
    assert len(chat_embeddings.embed(chatting.engine, ["hello"])["vectors"][0]) == 64
