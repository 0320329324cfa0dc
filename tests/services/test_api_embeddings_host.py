"""The engine host's embedding slot with real llama.cpp workers on generated GGUFs: where an embeddings request
goes (the chat model's own context, or the slot beside it), the slot's own line (an embedding while a reply is
generating), a chat load that does not fit beside the slot's model (the slot makes room), the slot's worker dying,
and the host closing the slot's worker."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.memory.fit import MachineMemory
from app.core.params import LoadParams, SamplingParams
from app.services.engines.entries import EngineKind
from app.services.engines.events import EmbeddingModelLoaded, EmbeddingModelUnloaded, ModelLoaded, ModelUnloaded
from app.services.engines.host import EngineHost
from tests.support.embedding_gguf import write_embedding_gguf
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)

USER = [{"role": "user", "content": "hello there"}]
EMBED = LoadParams(n_ctx=512, embedding=True)
CHAT = LoadParams(n_ctx=512)
PLENTY = MachineMemory((), (), (), 64 << 30, 64 << 30, "no GPU here")
NONE_FREE = MachineMemory((), (), (), 64 << 30, 0, "no GPU here")


def run(coro, timeout=90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slot-models")
    return {
        "embed": str(write_embedding_gguf(folder / "embed.gguf")),
        "chat": str(write_tiny_gguf(folder / "chat.gguf", name="chat")),
        "other": str(write_tiny_gguf(folder / "other.gguf", name="other", seed=3)),
        "long": str(write_tiny_gguf(folder / "long.gguf", name="long", context_length=8192, never_eos=True)),
    }


async def _embed_beside(host, entry):
    async with host.use_beside(entry, EMBED) as turn:
        return await turn.embed_counted(["the cat sat"])


def test_where_an_embeddings_request_goes(models):
    async def scenario():
        host = EngineHost(LlamaCppBackend())
        try:
            fresh = [await host.embeds_beside(models[m], EMBED) for m in ("chat", "embed")]
            await host.load(models["chat"], CHAT)
            loaded = [await host.embeds_beside(models[m], EMBED) for m in ("chat", "other", "embed")]
            ollama = await host.embeds_beside("ollama:llama3.2", EMBED)
            return fresh, loaded, ollama, host.loaded(EngineKind.LLAMACPP)
        finally:
            await host.close()

    fresh, loaded, ollama, main = run(scenario())
    assert fresh == [False, True]  # a chat model is loaded for chat (its context embeds); an embedding model beside
    assert loaded == [False, True, True] and not ollama
    assert main.chat_embeds and main.serves(models["chat"], EMBED)


def test_the_slot_embeds_while_the_chat_model_is_generating(models):
    async def scenario():
        host = EngineHost(LlamaCppBackend())
        try:
            await host.load(models["long"], LoadParams(n_ctx=4096))
            reply = host.stream_chat(EngineKind.LLAMACPP, USER, SamplingParams(max_tokens=3000, temperature=0.0))
            await reply.__anext__()  # generating now, for 3,000 tokens
            vectors, tokens = await _embed_beside(host, models["embed"])
            during = host.generating(EngineKind.LLAMACPP)
            reply.stop()
            async for _ in reply:
                pass
            return vectors, tokens, during, reply.stats
        finally:
            await host.close()

    vectors, tokens, during, stats = run(scenario())
    assert len(vectors[0]) == 64 and tokens > 0
    assert during and stats.finish_reason == "stopped"  # the embedding did not wait for the reply


def test_a_chat_load_that_does_not_fit_beside_the_slots_model_makes_room(models, caplog):
    caplog.set_level(logging.WARNING, logger="app.services.engines")
    events: list[object] = []

    async def scenario():
        host = EngineHost(LlamaCppBackend(machine_memory=lambda: NONE_FREE if host.embedding_slot.loaded else PLENTY))
        host.subscribe(events.append)
        try:
            await _embed_beside(host, models["embed"])
            await host.load(models["chat"], CHAT)  # refused while the slot's model holds the memory
            return host.embedding_slot.loaded, host.loaded(EngineKind.LLAMACPP)
        finally:
            await host.close()

    slot, main = run(scenario())
    assert slot is None and main.entry == models["chat"]
    kinds = [type(e) for e in events if isinstance(e, ModelLoaded | EmbeddingModelLoaded | EmbeddingModelUnloaded)]
    assert kinds[:3] == [EmbeddingModelLoaded, EmbeddingModelUnloaded, ModelLoaded]
    assert "could not load beside the embedding model tiny-embed" in caplog.text


def test_a_dead_slot_worker_unloads_the_slot_alone_and_the_next_request_loads_it_again(models):
    events: list[object] = []

    async def scenario():
        host = EngineHost(LlamaCppBackend())
        host.subscribe(events.append)
        try:
            await host.load(models["chat"], CHAT)
            await _embed_beside(host, models["embed"])
            host.embedding_slot.backend.kill_worker()
            await until(lambda: host.embedding_slot.loaded is None)
            again = await _embed_beside(host, models["embed"])
            return again, host.loaded(EngineKind.LLAMACPP), list(events)
        finally:
            await host.close()

    (vectors, _), main, heard = run(scenario())
    assert len(vectors[0]) == 64 and main is not None and main.entry == models["chat"]
    assert [type(e) for e in heard if isinstance(e, EmbeddingModelLoaded | EmbeddingModelUnloaded)] == [
        EmbeddingModelLoaded, EmbeddingModelUnloaded, EmbeddingModelLoaded,
    ]  # fmt: skip
    assert not any(isinstance(e, ModelUnloaded) for e in heard)  # the chat model was never touched


def test_closing_the_host_ends_the_slots_worker(models):
    async def scenario():
        host = EngineHost(LlamaCppBackend())
        await _embed_beside(host, models["embed"])
        pid = host.embedding_slot.backend.worker_pid
        await host.close()
        return pid

    pid = run(scenario())
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
