"""Vectors in the documents database (real sqlite-vec, the real indexer and parse worker): one vector per chunk
from real llama.cpp embedding models on the engine host, embedding resumed after a kill mid-run with nothing
embedded twice, a model change that embeds again without touching the keyword index, and no sqlite-vec at all
(keyword search goes on, saying why)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.memory.fit import MachineMemory
from app.core.params import LoadParams
from app.services.documents import events as ev
from app.services.documents import vectors
from app.services.documents.backfill import BATCH
from app.services.documents.embedder import HostEmbedder
from app.services.documents.service import HYBRID, KEYWORD, DocumentsService
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost
from tests.support.embedding_gguf import write_embedding_gguf
from tests.support.gguf_factory import write_tiny_gguf
from tests.support.hashed_embedder import HashedEmbedder, hashed_vector
from tests.support.minilm_gguf import minilm_gguf  # noqa: F401 (a fixture)
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(240)
PLENTY = MachineMemory((), (), (), 64 << 30, 64 << 30, "no GPU here")
TOPICS = {
    "garden.txt": "Tomatoes need full sun and steady watering. Prune the suckers so the plant puts energy into fruit.",
    "engine.txt": "The car engine overheated because the radiator coolant leaked; replace the hose and refill it.",
    "bread.txt": "Knead the dough for ten minutes, let it rise until doubled, then bake the loaf at 220 degrees.",
    "stars.txt": "A telescope with a wide aperture gathers more light, so faint galaxies become visible at night.",
}


def run(coro, timeout=200):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def write_notes(folder: Path, files: dict[str, str] = TOPICS, repeat: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text("\n\n".join(f"{text} (part {n})" for n in range(repeat)))
    return folder


def host_embedders(host: EngineHost):
    return lambda entry: HostEmbedder(host, entry, lambda: LoadParams(n_ctx=512))


async def settled(service: DocumentsService, model: str | None, timeout: float = 150.0) -> ev.EmbeddingProgress:
    def done() -> bool:
        state = service.embedding()
        return state.model == model and state.state in (ev.EMBED_DONE, ev.EMBED_FAILED, ev.EMBED_UNAVAILABLE)

    await until(done, timeout)
    return service.embedding()


def read(service: DocumentsService, query):
    assert service._store is not None
    return service._store.read(query)


def stored(service: DocumentsService) -> dict[int, np.ndarray]:
    """Every chunk's vector, by chunk id."""
    rows = read(service, lambda db: db.execute(f"SELECT chunk_id, embedding FROM {vectors.TABLE}").fetchall())
    return {chunk_id: np.frombuffer(blob, dtype=np.float32) for chunk_id, blob in rows}


def chunk_texts(service: DocumentsService) -> dict[int, str]:
    return dict(read(service, lambda db: db.execute("SELECT id, text FROM chunks").fetchall()))


def test_each_chunk_gets_one_vector_from_the_model_on_the_engine_host(tmp_path, minilm_gguf):  # noqa: F811
    notes = write_notes(tmp_path / "notes")
    events: list[ev.EmbeddingProgress] = []

    async def scenario():
        host = EngineHost(LlamaCppBackend(machine_memory=lambda: PLENTY))
        service = DocumentsService(tmp_path / "d.sqlite3", embedder_for=host_embedders(host))
        service.subscribe(lambda e: events.append(e) if isinstance(e, ev.EmbeddingProgress) else None)
        try:
            await service.open()
            service.set_embedding_model(str(minilm_gguf))
            await service.index([str(notes)])
            final = await settled(service, str(minilm_gguf))
            found, texts = stored(service), chunk_texts(service)
            meta = read(service, vectors.meta)
            hits, mode = await service.search_with_mode("why did my car overheat", top=2)
            beside = host.embedding_slot is not None and host.embedding_slot.holds(str(minilm_gguf))
            return final, found, texts, meta, hits, mode, beside
        finally:
            await service.close()
            await host.close()

    final, found, texts, meta, hits, mode, beside = run(scenario())
    assert final.state == ev.EMBED_DONE and final.embedded == final.total == len(texts) == 4
    assert set(found) == set(texts) and meta == vectors.VectorMeta(str(minilm_gguf), 384)
    assert all(abs(float(np.linalg.norm(v)) - 1.0) < 1e-4 for v in found.values())
    assert beside  # in the embedding slot: a chat model loaded later stays loaded beside it
    assert mode == HYBRID and Path(hits[0].path).name == "engine.txt"
    assert any(e.state == ev.EMBEDDING for e in events)


KILLED_RUN = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from pathlib import Path
    from app.services.documents.service import DocumentsService
    from tests.support.hashed_embedder import HashedEmbedder

    def kill_on_third(texts, seen=[]):
        seen.append(texts)
        if len(seen) == 3:
            os.kill(os.getpid(), signal.SIGKILL)  # mid-run: two batches committed, the third in flight

    async def main():
        embedder = HashedEmbedder(before=kill_on_third)
        service = DocumentsService(Path(sys.argv[1]), embedder_for=lambda entry: embedder, embedding_model="hashed")
        await service.open()
        await service.index([sys.argv[2]])
        await asyncio.sleep(120)

    asyncio.run(main())
    """
)


def test_embedding_resumes_after_a_kill_and_embeds_nothing_twice(tmp_path):
    notes = write_notes(tmp_path / "notes", {f"note{n}.txt": f"note number {n} about topic {n}" for n in range(80)})
    database = tmp_path / "d.sqlite3"
    child = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, str(database), str(notes)],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    embedder = HashedEmbedder()

    async def scenario():
        service = DocumentsService(database, embedder_for=lambda entry: embedder, embedding_model="hashed")
        try:
            await service.open()
            before = await asyncio.to_thread(read, service, vectors.counts)
            final = await settled(service, "hashed")
            return before, final, stored(service), chunk_texts(service)
        finally:
            await service.close()

    before, final, found, texts = run(scenario())
    assert before == (2 * BATCH, 80)  # the two batches committed before the kill
    assert final.state == ev.EMBED_DONE and final.embedded == final.total == 80
    assert sum(len(batch) for batch in embedder.batches) == 80 - 2 * BATCH  # only what had no vector
    assert set(found) == set(texts)
    for chunk_id, vector in found.items():
        assert np.allclose(vector, hashed_vector(texts[chunk_id]), atol=1e-6)


def test_a_new_model_embeds_again_without_touching_the_keyword_index(tmp_path, minilm_gguf):  # noqa: F811
    notes = write_notes(tmp_path / "notes")
    tiny = str(write_embedding_gguf(tmp_path / "tiny-embed.gguf"))

    def keyword_state(service):
        return read(
            service,
            lambda db: (
                db.execute("SELECT id, file_id, text FROM chunks ORDER BY id").fetchall(),
                db.execute("SELECT rowid, text FROM chunks_fts ORDER BY rowid").fetchall(),
                db.execute("SELECT id, state, indexed_at FROM files ORDER BY id").fetchall(),
            ),
        )

    async def scenario():
        host = EngineHost(LlamaCppBackend(machine_memory=lambda: PLENTY))
        service = DocumentsService(tmp_path / "d.sqlite3", embedder_for=host_embedders(host), embedding_model=tiny)
        try:
            await service.open()
            await service.index([str(notes)])
            first = await settled(service, tiny)
            dimension_before = read(service, vectors.meta).dimension
            keywords_before = keyword_state(service)
            hits_before = await service.search("dough rise", mode=KEYWORD)
            service.set_embedding_model(str(minilm_gguf))
            second = await settled(service, str(minilm_gguf))
            meta = read(service, vectors.meta)
            hits_after = await service.search("dough rise", mode=KEYWORD)
            keywords_after = keyword_state(service)
            service.set_embedding_model(None)
            await until(lambda: service._embed_task is not None and service._embed_task.done())
            cleared = read(service, vectors.counts), read(service, vectors.ready)
            hits, mode = await service.search_with_mode("dough rise")
            return first, dimension_before, keywords_before, hits_before, second, meta, hits_after, keywords_after, \
                cleared, hits, mode  # fmt: skip
        finally:
            await service.close()
            await host.close()

    (first, dimension_before, keywords_before, hits_before, second, meta, hits_after, keywords_after, cleared, hits,
     mode) = run(scenario())  # fmt: skip
    assert first.state == ev.EMBED_DONE and dimension_before == 64
    assert second.state == ev.EMBED_DONE and second.embedded == second.total == first.total == 4
    assert meta == vectors.VectorMeta(str(minilm_gguf), 384)
    assert keywords_after == keywords_before and hits_after == hits_before
    assert cleared == ((0, 4), False) and mode == KEYWORD and hits == hits_before


def test_without_sqlite_vec_keyword_search_goes_on_and_says_why(tmp_path, monkeypatch):
    notes = write_notes(tmp_path / "notes")
    database = tmp_path / "d.sqlite3"
    embedder = HashedEmbedder()

    async def with_vectors():
        service = DocumentsService(database, embedder_for=lambda entry: embedder, embedding_model="hashed")
        try:
            await service.open()
            await service.index([str(notes)])
            return await settled(service, "hashed")
        finally:
            await service.close()

    async def without_vectors():
        service = DocumentsService(database, embedder_for=lambda entry: embedder, embedding_model="hashed")
        try:
            await service.open()
            (notes / "bread.txt").write_text("Sourdough needs a starter fed daily; the dough rises slowly overnight.")
            totals = await service.index([str(notes)])  # re-indexing deletes chunks: no vec0 trigger may fire
            hits, mode = await service.search_with_mode("sourdough starter")
            state = await settled(service, "hashed")
            return service.vector_problem, totals, hits, mode, state
        finally:
            await service.close()

    assert run(with_vectors()).state == ev.EMBED_DONE
    monkeypatch.setitem(sys.modules, "sqlite_vec", None)  # import sqlite_vec fails
    problem, totals, hits, mode, state = run(without_vectors())
    assert problem is not None and "sqlite-vec is not installed" in problem
    assert totals is not None and totals.indexed == 1 and totals.failed == 0
    assert mode == KEYWORD and Path(hits[0].path).name == "bread.txt"
    assert state.state == ev.EMBED_UNAVAILABLE and state.reason == problem
    monkeypatch.delitem(sys.modules, "sqlite_vec")
    embedder.batches.clear()
    assert run(with_vectors()).embedded == 4  # back with the extension: the triggerless vectors are embedded again
    assert sum(len(batch) for batch in embedder.batches) == 4


def test_the_vectors_go_with_their_chunks(tmp_path):
    notes = write_notes(tmp_path / "notes")

    async def scenario():
        service = DocumentsService(tmp_path / "d.sqlite3", embedder_for=lambda e: HashedEmbedder(), embedding_model="h")
        try:
            await service.open()
            await service.index([str(notes)])
            await settled(service, "h")
            os.remove(notes / "stars.txt")
            await service.index([str(notes)])
            await settled(service, "h")
            return stored(service), chunk_texts(service)
        finally:
            await service.close()

    found, texts = run(scenario())
    assert set(found) == set(texts) and len(texts) == 3


def test_embedding_pauses_resumes_and_cancels_with_indexing(tmp_path):
    notes = write_notes(tmp_path / "notes", {f"note{n}.txt": f"note number {n} about topic {n}" for n in range(40)})
    more = write_notes(tmp_path / "more", {f"more{n}.txt": f"another note {n} on subject {n}" for n in range(40)})
    actions: list = []

    def act(texts):
        if actions:
            actions.pop(0)()

    embedder = HashedEmbedder(before=act)

    async def scenario():
        service = DocumentsService(tmp_path / "d.sqlite3", embedder_for=lambda e: embedder, embedding_model="h")
        try:
            await service.open()
            actions.append(service.pause)  # as the first batch is embedded
            await service.index([str(notes)])
            await until(lambda: service.embedding().state == ev.EMBED_PAUSED)
            paused = service.embedding(), len(embedder.batches)
            service.resume()
            done = await settled(service, "h")
            actions.append(service.cancel)
            await service.index([str(more)])
            await until(lambda: service.embedding().state == ev.EMBED_CANCELLED)
            cancelled = await asyncio.to_thread(read, service, vectors.counts)
            service.start_embedding()
            return paused, done, cancelled, await settled(service, "h")
        finally:
            await service.close()

    (paused, batches), done, cancelled, final = run(scenario())
    assert paused.embedded == BATCH and batches == 1  # the batch in flight is committed, then it waits
    assert done.state == ev.EMBED_DONE and done.embedded == done.total == 40
    assert 40 <= cancelled[0] < 80 and cancelled[1] == 80
    assert final.state == ev.EMBED_DONE and final.embedded == final.total == 80


def test_an_embedding_model_that_does_not_fit_beside_the_chat_model_waits_and_never_evicts_it(tmp_path):
    chat = str(write_tiny_gguf(tmp_path / "chat.gguf"))
    embed = str(write_embedding_gguf(tmp_path / "embed.gguf"))
    notes = write_notes(tmp_path / "notes")
    memory = [PLENTY]  # then none left beside the chat model

    async def scenario():
        host = EngineHost(LlamaCppBackend(machine_memory=lambda: memory[0]))
        service = DocumentsService(tmp_path / "d.sqlite3", embedder_for=host_embedders(host), embedding_model=embed)
        try:
            await host.load(chat, LoadParams(n_ctx=512))
            memory[0] = MachineMemory((), (), (), 64 << 30, 0, "no GPU here")
            await service.open()
            await service.index([str(notes)])
            waiting = await until_state(service, ev.EMBED_WAITING)
            still_loaded = host.loaded(EngineKind.LLAMACPP)
            hits, mode = await service.search_with_mode("radiator coolant")
            await host.unload(EngineKind.LLAMACPP)  # the Workstation calls memory_freed on ModelUnloaded
            memory[0] = PLENTY
            service.memory_freed()
            return waiting, still_loaded, hits, mode, await settled(service, embed)
        finally:
            await service.close()
            await host.close()

    waiting, still_loaded, hits, mode, final = run(scenario())
    assert waiting.reason is not None and "does not fit in memory beside" in waiting.reason
    assert still_loaded is not None and still_loaded.entry == chat
    assert mode == KEYWORD and Path(hits[0].path).name == "engine.txt"
    assert final.state == ev.EMBED_DONE and final.embedded == final.total == 4


async def until_state(service: DocumentsService, state: str) -> ev.EmbeddingProgress:
    await until(lambda: service.embedding().state == state, 120)
    return service.embedding()


def test_the_workstation_follows_the_setting_and_frees_waiting_embeddings(tmp_path):
    from app.services.engines.events import ModelUnloaded
    from app.services.paths import app_paths
    from app.services.workstation import Workstation

    async def scenario():
        workstation = Workstation.create(app_paths().ensure())
        try:
            workstation.update_settings(documents_embedding_model="/models/embed.gguf")
            service = workstation.documents
            first = service.embedding().model
            freed: list[bool] = []
            service.memory_freed = lambda: freed.append(True)  # type: ignore[method-assign]
            workstation.host.emit(ModelUnloaded(EngineKind.LLAMACPP, "/models/chat.gguf"))
            workstation.update_settings(documents_embedding_model="")
            return first, service.embedding().model, freed
        finally:
            await workstation.close()

    assert run(scenario()) == ("/models/embed.gguf", None, [True])
