"""Embeddings without reloads (issue 26), against the real server and the real llama.cpp workers with the official
``openai`` SDK: a chat model answers embeddings on its loaded chat context (3 rounds of embed + chat = 1 load, the
same reply as without the embedding); a separate embedding GGUF stays loaded beside the chat model in the engine
host's embedding slot (2 loads in all, both stay), with its own idle TTL; where it does not fit by the memory
estimate it takes the chat model's place, as before, and says so in the log; ``usage`` counts the inputs' tokens.
The servers here run one request at a time (``n_parallel=1``): this is the single worker's part; the parallel
engine's is in test_api_parallel.
"""

from __future__ import annotations

import logging
import shutil

import pytest

from app.core.memory.fit import MachineMemory
from app.services import starter_model
from app.services.api.config import ServerConfig
from app.services.engines.embedding_slot import EmbeddingSlot
from app.services.engines.entries import EngineKind
from app.services.engines.events import EmbeddingModelLoaded, EmbeddingModelUnloaded, ModelLoaded, ModelUnloaded
from app.services.monitor.engine_processes import EMBEDDINGS, host_targets
from tests.support.api_harness import ApiHarness
from tests.support.embedding_gguf import write_embedding_gguf
from tests.support.gguf_factory import write_tiny_gguf

pytest.importorskip(starter_model.PACKAGE)
pytestmark = pytest.mark.timeout(300)

STARTER = starter_model.FILE_NAME  # the chat model: a file name resolves to its model
EMBED = "tiny-embed.gguf"  # a model that pools its own vectors: an embedding model
OTHER_CHAT = "tiny-chat.gguf"
PROMPT = [{"role": "user", "content": "The capital of France is"}]
PLENTY = MachineMemory((), (), (), 64 << 30, 64 << 30, "no GPU here")
TINY = MachineMemory((), (), (), 64 << 30, 1 << 20, "no GPU here")  # 1 MiB free: no second model fits


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("embedding-models")
    shutil.copy(starter_model.ensure_starter_model(tmp_path_factory.mktemp("starter")), folder / STARTER)
    write_embedding_gguf(folder / EMBED)
    write_tiny_gguf(folder / OTHER_CHAT, name="tiny-chat")
    return folder


@pytest.fixture(scope="module")
def server(folder, tmp_path_factory):
    settings = tmp_path_factory.mktemp("settings") / "model-settings.json"  # the starter gets its shipped preset
    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1), settings_file=settings) as harness:
        yield harness


@pytest.fixture
def api(server):
    """The module's server with nothing loaded and no events heard yet."""
    server.run(server.host.unload(EngineKind.LLAMACPP))
    server.run(server.host.unload_beside())
    server.events.clear()
    return server


def loads(api) -> list[str]:
    """The loads so far, as ``main:FILE`` (the engine's own model) and ``slot:FILE`` (the embedding slot)."""
    names = {ModelLoaded: "main", EmbeddingModelLoaded: "slot"}
    return [f"{names[type(e)]}:{e.entry.rsplit('/', 1)[-1]}" for e in api.events if type(e) in names]


def embed(api, model, texts, **extra):
    return api.openai().embeddings.create(model=model, input=texts, **extra)


def chat(api, model=STARTER, **extra) -> str:
    reply = api.openai().chat.completions.create(model=model, messages=PROMPT, max_tokens=8, temperature=0, **extra)
    return reply.choices[0].message.content


def slot_holds(api, name) -> bool:
    slot = api.host.embedding_slot
    return slot is not None and slot.loaded is not None and slot.loaded.entry.endswith(name)


def test_rounds_of_embed_and_chat_on_the_chat_model_load_it_once(api):
    replies, vectors = [], []
    for _ in range(3):
        result = embed(api, STARTER, ["the cat sat on the mat", "a journey of a thousand miles"])
        vectors.append([d.embedding for d in result.data])
        replies.append(chat(api))
    assert loads(api) == [f"main:{STARTER}"]  # loaded for chat by the first embedding; it embeds on that context
    assert not api.host.loaded(EngineKind.LLAMACPP).params.embedding
    assert replies[0] and replies == [replies[0]] * 3
    assert vectors[0][0] == pytest.approx(vectors[2][0], abs=1e-5) and len(vectors[0][0]) == 640
    assert sum(x * x for x in vectors[0][0]) == pytest.approx(1.0, rel=1e-3)
    api.run(api.host.unload(EngineKind.LLAMACPP))
    assert chat(api) == replies[0]  # a fresh load that never embedded says the same


def test_a_separate_embedding_model_stays_loaded_beside_the_chat_model(api):
    replies = []
    for _ in range(3):
        assert len(embed(api, EMBED, ["the cat sat"]).data[0].embedding) == 64
        replies.append(chat(api))
    assert loads(api) == [f"slot:{EMBED}", f"main:{STARTER}"]
    assert api.host.loaded(EngineKind.LLAMACPP).entry.endswith(STARTER) and slot_holds(api, EMBED)
    assert replies[0] and replies == [replies[0]] * 3
    assert not any(isinstance(e, ModelUnloaded | EmbeddingModelUnloaded) for e in api.events)
    listed = {m.id: (m.model_extra or {}).get("state") for m in api.openai().models.list().data}
    assert sorted(listed.values()).count("loaded") == 2, listed  # /v1/models knows the slot's model is in memory
    watched = {t.kind: t for t in host_targets(api.host)}  # the Monitor counts the slot's worker too
    assert watched[EMBEDDINGS].root_pid == api.host.embedding_slot.backend.worker_pid is not None
    assert watched[EMBEDDINGS].label.startswith("llama.cpp embeddings: ")


def test_the_embedding_slot_unloads_after_its_own_idle_time_and_the_chat_model_stays(api):
    chat(api)
    embed(api, EMBED, ["the cat sat"], extra_body={"keep_alive": 0.2})
    assert api.wait_for(lambda: any(isinstance(e, EmbeddingModelUnloaded) for e in api.events), 30)
    assert not slot_holds(api, EMBED) and api.host.loaded(EngineKind.LLAMACPP).entry.endswith(STARTER)
    assert not any(isinstance(e, ModelUnloaded) for e in api.events)


def test_the_servers_idle_ttl_applies_to_the_slot_on_its_own(folder, tmp_path):
    config = ServerConfig(port=0, n_parallel=1, idle_ttl_s=0.3)
    with ApiHarness(folder, config, settings_file=tmp_path / "s.json") as api:
        chat(api, extra_body={"keep_alive": -1})  # the chat model stays whatever the server's TTL
        embed(api, EMBED, ["the cat sat"])
        assert api.wait_for(lambda: any(isinstance(e, EmbeddingModelUnloaded) for e in api.events), 30)
        assert api.host.loaded(EngineKind.LLAMACPP) is not None
        assert not any(isinstance(e, ModelUnloaded) for e in api.events)


def test_usage_counts_the_inputs_tokens(api):
    one = embed(api, EMBED, ["the cat sat on the mat"]).usage
    two = embed(api, EMBED, ["the cat sat on the mat"] * 2).usage
    assert one.prompt_tokens > 3 and one.total_tokens == one.prompt_tokens
    assert two.prompt_tokens == two.total_tokens == 2 * one.prompt_tokens
    on_chat = embed(api, STARTER, ["the cat sat on the mat"]).usage  # the chat context counts too
    assert on_chat.prompt_tokens == on_chat.total_tokens > 3
    assert api.finished_records("embeddings")[-1].prompt_tokens == on_chat.prompt_tokens


def test_a_chat_model_asked_for_vectors_beside_another_goes_to_the_slot_until_it_chats(api):
    chat(api)
    embed(api, OTHER_CHAT, ["the cat sat"])
    assert slot_holds(api, OTHER_CHAT) and api.host.loaded(EngineKind.LLAMACPP).entry.endswith(STARTER)
    chat(api, OTHER_CHAT)  # loaded for chat now: its chat context embeds, the slot's copy goes
    assert api.wait_for(lambda: not slot_holds(api, OTHER_CHAT), 10)
    embed(api, OTHER_CHAT, ["the cat sat"])
    assert loads(api) == [f"main:{STARTER}", f"slot:{OTHER_CHAT}", f"main:{OTHER_CHAT}"]


def test_an_embedding_model_that_does_not_fit_beside_takes_the_chat_models_place(api, caplog):
    host = api.host
    kept, host.embedding_slot = host.embedding_slot, EmbeddingSlot(host.llamacpp.sibling, lambda: TINY, host.emit)
    caplog.set_level(logging.INFO, logger="app.services.engines")
    try:
        for _ in range(2):
            embed(api, EMBED, ["the cat sat"])
            chat(api)
    finally:
        host.embedding_slot = kept
    assert loads(api) == [f"main:{EMBED}", f"main:{STARTER}"] * 2  # as before: a swap each time
    assert f"{EMBED} does not fit in the slot, so it loads alone (memory estimate: Won't fit" in caplog.text
    assert f"{EMBED} does not fit beside Gemma 3 270m, so it takes that model's place (memory estimate:" in caplog.text
