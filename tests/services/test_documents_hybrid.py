"""Hybrid search with a real embedding model: all-MiniLM-L6-v2 converted to GGUF (``tests/support/minilm_gguf``)
loads in llama.cpp, its vectors match a numpy forward pass of the same weights, close sentences score higher than
unrelated ones, and on a small question set hybrid ranking (BM25 and vectors fused) is at least as good as
keywords alone. Plus reciprocal rank fusion itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from app.backends.llamacpp.backend import LlamaCppBackend
from app.core.memory.fit import MachineMemory
from app.core.params import LoadParams
from app.services.documents import events as ev
from app.services.documents.embedder import HostEmbedder
from app.services.documents.hybrid import RRF_K, fuse
from app.services.documents.service import HYBRID, KEYWORD, DocumentsService
from app.services.engines.host import EngineHost
from tests.support.minilm_gguf import minilm_gguf, model_zip, reference_embedding  # noqa: F401 (a fixture)
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(240)
PLENTY = MachineMemory((), (), (), 64 << 30, 64 << 30, "no GPU here")
EMBED = LoadParams(n_ctx=512, embedding=True)

HELP_DESK = {
    "passwords.txt": "To reset your account password, open Settings, choose Security and follow the recovery link.",
    "refunds.txt": "Purchases can be returned within 30 days for a full refund if the item is unused and boxed.",
    "shipping.txt": "Orders leave our warehouse within two business days; international delivery takes three weeks.",
    "battery.txt": "The laptop battery lasts about ten hours; lowering the screen brightness extends its runtime.",
    "printer.txt": "If the printer reports a paper jam, open the rear tray and gently pull out the stuck sheet.",
    "wifi.txt": "When the wireless network keeps dropping, restart the router and move it away from the microwave.",
    "vacation.txt": "Employees earn twenty days of paid leave per year, requested through the HR portal.",
    "coffee.txt": "The office espresso machine needs descaling every month with the citric acid tablets.",
}
QUESTIONS = {
    "I forgot my login credentials, how do I get back in?": "passwords.txt",
    "Can I get my money back for something I bought?": "refunds.txt",
    "How long until my parcel arrives overseas?": "shipping.txt",
    "my notebook computer runs out of charge too fast": "battery.txt",
    "there is paper stuck in the printer": "printer.txt",
    "the internet connection keeps disconnecting": "wifi.txt",
    "how many holidays do staff get": "vacation.txt",
    "cleaning the coffee maker": "coffee.txt",
}


def run(coro, timeout=200):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def cosine(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_reciprocal_rank_fusion_adds_one_over_k_plus_rank():
    fused = dict(fuse([[1, 2, 3], [3, 1]]))
    assert fused[1] == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + 2))
    assert fused[3] == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 1))
    assert fused[2] == pytest.approx(1 / (RRF_K + 2))
    assert [chunk for chunk, _ in fuse([[1, 2, 3], [3, 1]])] == [1, 3, 2]  # in both lists beats a lone second place
    assert fuse([]) == [] and fuse([[], [7]]) == [(7, 1 / (RRF_K + 1))]


def test_minilm_loads_in_llama_cpp_and_close_sentences_score_higher(minilm_gguf):  # noqa: F811
    sentences = [
        "A man is playing a guitar on stage.",
        "Someone strums an acoustic guitar at a concert.",
        "The central bank raised interest rates again this quarter.",
    ]

    async def scenario():
        backend = LlamaCppBackend(machine_memory=lambda: PLENTY)
        try:
            info = await backend.load(str(minilm_gguf), EMBED)
            return info, await backend.embed(sentences)
        finally:
            await backend.close()

    info, vectors = run(scenario())
    assert info.architecture == "bert" and len(vectors) == 3 and len(vectors[0]) == 384
    close, unrelated = cosine(vectors[0], vectors[1]), cosine(vectors[0], vectors[2])
    assert close > 0.5 and close > unrelated + 0.3


def test_minilm_vectors_match_a_numpy_forward_pass(minilm_gguf):  # noqa: F811
    import llama_cpp

    text = "Vector search finds passages that share meaning, not only words."
    vocab = llama_cpp.Llama(str(minilm_gguf), vocab_only=True, verbose=False)
    try:
        tokens = vocab.tokenize(text.encode(), add_bos=True, special=False)
    finally:
        vocab.close()
    assert tokens[0] == 101 and tokens[-1] == 102  # [CLS] … [SEP], as BERT's tokenizer gives them

    async def scenario():
        backend = LlamaCppBackend(machine_memory=lambda: PLENTY)
        try:
            await backend.load(str(minilm_gguf), EMBED)
            return (await backend.embed([text]))[0]
        finally:
            await backend.close()

    found = np.asarray(run(scenario()))
    source = model_zip()
    assert source is not None
    expected = reference_embedding(source, tokens)
    assert np.max(np.abs(found - expected)) < 1e-3


def mean_reciprocal_rank(ranked: dict[str, list[str]]) -> float:
    total = 0.0
    for question, names in ranked.items():
        wanted = QUESTIONS[question]
        total += 1.0 / (names.index(wanted) + 1) if wanted in names else 0.0
    return total / len(ranked)


def test_hybrid_ranks_a_question_set_at_least_as_well_as_keywords(tmp_path, minilm_gguf):  # noqa: F811
    notes = tmp_path / "help"
    notes.mkdir()
    for name, text in HELP_DESK.items():
        (notes / name).write_text(text)

    async def scenario():
        host = EngineHost(LlamaCppBackend(machine_memory=lambda: PLENTY))
        service = DocumentsService(
            tmp_path / "d.sqlite3",
            embedder_for=lambda entry: HostEmbedder(host, entry, lambda: LoadParams(n_ctx=512)),
            embedding_model=str(minilm_gguf),
        )
        try:
            await service.open()
            await service.index([str(notes)])
            await until(lambda: service.embedding().state == ev.EMBED_DONE and service.embedding().total == 8, 150)
            ranked: dict[str, dict[str, list[str]]] = {KEYWORD: {}, HYBRID: {}}
            for question in QUESTIONS:
                for mode in (KEYWORD, HYBRID):
                    hits, used = await service.search_with_mode(question, top=5, mode=mode)
                    assert used == mode
                    ranked[mode][question] = [Path(hit.path).name for hit in hits]
            return ranked
        finally:
            await service.close()
            await host.close()

    ranked = run(scenario())
    keyword, hybrid = mean_reciprocal_rank(ranked[KEYWORD]), mean_reciprocal_rank(ranked[HYBRID])
    firsts = {mode: sum(names[:1] == [QUESTIONS[q]] for q, names in ranked[mode].items()) for mode in ranked}
    assert hybrid >= keyword and firsts[HYBRID] >= firsts[KEYWORD], (ranked, keyword, hybrid)
    assert firsts[HYBRID] >= 6, ranked


def test_a_hybrid_search_in_one_collection_finds_only_its_passages(tmp_path):
    from tests.support.hashed_embedder import HashedEmbedder

    first, second = tmp_path / "first", tmp_path / "second"
    for folder, names in ((first, list(HELP_DESK)[:4]), (second, list(HELP_DESK)[4:])):
        folder.mkdir()
        for name in names:
            (folder / name).write_text(HELP_DESK[name])

    async def scenario():
        service = DocumentsService(tmp_path / "d.sqlite3", embedder_for=lambda e: HashedEmbedder(), embedding_model="h")
        try:
            await service.open()
            await service.index([str(first)], "first")
            await service.index([str(second)], "second")
            await until(lambda: service.embedding().state == ev.EMBED_DONE and service.embedding().embedded == 8)
            scoped = await service.search_with_mode("the printer and the espresso machine", "second", top=8)
            everywhere = await service.search_with_mode("the printer and the espresso machine", None, top=8)
            missing = await service.search_with_mode("printer", "no such collection")
            return scoped, everywhere, missing
        finally:
            await service.close()

    (scoped, mode), (everywhere, _), missing = run(scenario())
    assert mode == HYBRID and {hit.collection for hit in scoped} == {"second"} and len(scoped) == 4
    assert {hit.collection for hit in everywhere} == {"first", "second"} and len(everywhere) == 8
    assert missing == ([], HYBRID)
