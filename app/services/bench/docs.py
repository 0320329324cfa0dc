"""``llm-workstation bench docs``: the document index measured — indexing rate, search latency, retrieval quality.

- **Indexing** (pages/s, MB/s): the documents service indexes a generated corpus (``docs_corpus``: fpdf2 PDFs, text
  and Markdown) and real PDFs (``--pdf DIR``) into a throw-away database, keyword only; with an embedding model the
  same again, timed until the service's background embedding (as in the app) has written every chunk's vector. A
  text or Markdown file counts as one page.
- **Search latency** (p50/p95 ms, top 10): ``search_bench``'s synthetic index at each size (10,000 and 100,000
  chunks); keyword, and hybrid with a random unit 384-dimensional vector per chunk and per query (the fusion and the
  vector scan measured without a model; the embedding of the query is timed apart when a model is given).
- **Retrieval quality** (recall@5): a hand-written question set about two PDFs Debian installs
  (``data/docs_questions.json``): a question counts when one of its top 5 passages is on the page that answers it.
  Keyword always; hybrid with an embedding model (the service's own hybrid search, once every chunk has a vector).

Every function blocks or is a coroutine that runs its blocking parts in threads; nothing here needs Qt."""

from __future__ import annotations

import asyncio
import functools
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from app.services.bench.docs_corpus import write_corpus
from app.services.documents import events as ev
from app.services.documents import search_bench
from app.services.documents.store import DocumentStore

if TYPE_CHECKING:
    from app.services.documents.service import DocumentsService

QUESTIONS = Path(__file__).parent / "data" / "docs_questions.json"
VECTOR_DIMENSION = 384
RECALL_AT = 5
NO_MODEL = "no embedding model given"


class Embedder(Protocol):
    async def embed(self, texts: list[str]) -> list[list[float]]: ...


@dataclass(frozen=True)
class DocsBenchOptions:
    pdfs: int = 12
    pages_per_pdf: int = 10
    texts: int = 24
    pdf_dir: str | None = None
    chunks: tuple[int, ...] = (10_000, 100_000)
    queries: int = 200
    questions: Path | None = QUESTIONS
    embedding_model: str | None = None  # its name in the result; the embedder itself is passed to run()
    seed: int = 28


@dataclass
class DocsBenchResult:
    indexing: list[dict[str, Any]] = field(default_factory=list)
    search: list[dict[str, Any]] = field(default_factory=list)
    quality: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"indexing": self.indexing, "search": self.search, "quality": self.quality, "notes": self.notes}


Progress = Callable[[str], None]


async def run(
    options: DocsBenchOptions, embedder: Embedder | None = None, progress: Progress | None = None
) -> DocsBenchResult:
    """The three parts in order (each in its own temporary folder)."""
    say = progress or (lambda _text: None)
    result = DocsBenchResult()
    if embedder is not None:
        say("loading the embedding model")
        started = time.perf_counter()
        await embedder.embed(["warm-up"])
        result.notes.append(f"embedding model loaded in {time.perf_counter() - started:.1f} s (not in the rates)")
    with tempfile.TemporaryDirectory(prefix="llmw-bench-docs-") as work:
        corpus = await asyncio.to_thread(
            write_corpus, Path(work) / "corpus", options.pdfs, options.pages_per_pdf, options.texts, options.seed
        )
        if corpus.note:
            result.notes.append(corpus.note)
        sources = [("generated", corpus.folder)]
        if options.pdf_dir:
            sources.append((f"PDFs in {options.pdf_dir}", Path(options.pdf_dir)))
        for number, (label, folder) in enumerate(sources):
            say(f"indexing {label}")
            database = Path(work) / f"index{number}.sqlite3"
            result.indexing.append(await index_rate(folder, label, database, None, None))
            if embedder is None or options.embedding_model is None:
                result.indexing.append({"corpus": label, "mode": "hybrid", "skipped": NO_MODEL})
                continue
            say(f"indexing {label} with embeddings")
            database = Path(work) / f"index{number}-vectors.sqlite3"
            result.indexing.append(await index_rate(folder, label, database, embedder, options.embedding_model))
    for chunks in options.chunks:
        say(f"search latency at {chunks:,} chunks")
        result.search.extend(await asyncio.to_thread(search_latency, chunks, options.queries, options.seed))
    say("retrieval quality")
    result.quality.extend(await quality(options.questions, embedder, options.embedding_model))
    return result


# --- indexing ------------------------------------------------------------------------------------------------------
def bench_service(database: Path, embedder: Embedder | None, model: str | None) -> DocumentsService:
    """A documents service on ``database`` as the Workstation makes one: with ``model`` it embeds in the background
    after each indexing run (``backfill.py``)."""
    from app.services.documents.service import DocumentsService

    service = DocumentsService(
        database, embedder_for=(lambda _entry: embedder) if embedder is not None else None, embedding_model=model
    )
    service.watch_interval_s = None
    return service


async def embedded(service: DocumentsService) -> ev.EmbeddingProgress:
    """Wait for the service's background embedding to stop running (done, failed, waiting, unavailable)."""
    changed = asyncio.Event()
    unsubscribe = service.subscribe(lambda _event: changed.set())
    try:
        while service.embedding().running:
            changed.clear()
            await changed.wait()
    finally:
        unsubscribe()
    return service.embedding()


async def index_rate(
    folder: Path, label: str, database: Path, embedder: Embedder | None, model: str | None
) -> dict[str, Any]:
    """One indexing row: the documents service indexes ``folder`` (and, with a model, embeds every chunk)."""
    row: dict[str, Any] = {"corpus": label, "mode": "hybrid" if model else "keyword"}
    service = bench_service(database, embedder, model)
    try:
        await service.open()
        if model is not None:
            await embedded(service)  # the empty index: done at once
        started = time.perf_counter()
        totals = await service.index([str(folder)], "bench")
        vectors_made = 0
        if model is not None:
            progress = await embedded(service)
            if progress.state != ev.EMBED_DONE:
                return row | {"skipped": f"embedding {progress.state}: {progress.reason}"}
            vectors_made = progress.embedded
        seconds = time.perf_counter() - started
        records = [r for r in await service.files("bench") if r.state == "indexed"]
    finally:
        await service.close()
    if totals is None or not records:
        return row | {"skipped": f"nothing indexed in {folder}"}
    pages = sum(r.pages or 1 for r in records)
    size_mb = sum(r.size for r in records) / 1e6
    return row | {
        "files": len(records),
        "failed": totals.failed,
        "pages": pages,
        "mb": round(size_mb, 2),
        "chunks": totals.chunks,
        "embedded": vectors_made,
        "seconds": round(seconds, 2),
        "pages_per_s": round(pages / seconds, 1),
        "mb_per_s": round(size_mb / seconds, 3),
    }


# --- search latency ------------------------------------------------------------------------------------------------
def search_latency(chunks: int, queries: int, seed: int = 28) -> list[dict[str, Any]]:
    """Keyword and hybrid p50/p95 over a synthetic index of ``chunks`` chunks (blocking)."""
    rng = random.Random(seed)
    words = search_bench._words(rng)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="llmw-bench-search-") as folder:
        store = DocumentStore(Path(folder) / "search.sqlite3")
        try:
            started = time.perf_counter()
            search_bench.build(store, chunks, rng, words)
            built_s = time.perf_counter() - started
            texts = [_query(rng, words) for _ in range(queries)]
            keyword = _timed(texts, lambda text: store.search(text, top=10))
            rows.append(_latency_row(chunks, "keyword", keyword, built_s))
            rows.append(_hybrid_latency(store, chunks, texts, rng))
        finally:
            store.close()
    return rows


def _query(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choices(words[50:2000], k=rng.randint(1, 4)))


def _timed(items: Sequence[Any], call: Callable[[Any], object]) -> list[float]:
    timings = []
    for item in items:
        started = time.perf_counter()
        call(item)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def _latency_row(chunks: int, mode: str, timings: list[float], built_s: float) -> dict[str, Any]:
    cuts = statistics.quantiles(timings, n=100)
    return {
        "chunks": chunks,
        "mode": mode,
        "queries": len(timings),
        "p50_ms": round(statistics.median(timings), 2),
        "p95_ms": round(cuts[94], 2),
        "built_s": round(built_s, 1),
    }


def _hybrid_latency(store: DocumentStore, chunks: int, texts: list[str], rng: random.Random) -> dict[str, Any]:
    try:
        import numpy as np

        from app.services.documents import vectors
        from app.services.documents.hybrid import hybrid_search
    except ImportError as exc:  # the vector modules are not in this build
        return {"chunks": chunks, "mode": "hybrid", "skipped": f"no vector search here ({exc})"}
    reason = store.read(vectors.load_extension)  # None: sqlite-vec is loaded
    if reason is not None:
        return {"chunks": chunks, "mode": "hybrid", "skipped": reason}
    generator = np.random.default_rng(rng.randrange(2**32))
    started = time.perf_counter()
    store.write(lambda db: vectors.use_model(db, "random-384"))
    ids = store.read(lambda db: [tuple(row) for row in db.execute("SELECT id, text FROM chunks ORDER BY id")])
    for start in range(0, len(ids), 5000):
        part = ids[start : start + 5000]
        matrix = _unit_rows(generator.standard_normal((len(part), VECTOR_DIMENSION), dtype=np.float32))
        store.write(functools.partial(vectors.put, model="random-384", chunks=part, vectors=matrix))
    built_s = time.perf_counter() - started
    queries = [
        (text, _unit_rows(generator.standard_normal((1, VECTOR_DIMENSION), dtype=np.float32))[0]) for text in texts
    ]
    timings = _timed(
        queries,
        lambda item: store.read(
            functools.partial(hybrid_search, query=item[0], vector=item[1], collection=None, top=10)
        ),
    )
    return _latency_row(chunks, "hybrid", timings, built_s) | {"vectors": f"random, {VECTOR_DIMENSION} dimensions"}


def _unit_rows(matrix: Any) -> Any:
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


# --- retrieval quality ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Question:
    text: str
    path: str
    pages: tuple[int, ...]


def load_questions(path: Path) -> tuple[list[Question], list[str]]:
    """The questions whose PDF is on this machine, and the PDFs that are missing."""
    data = json.loads(path.read_text(encoding="utf-8"))
    documents: dict[str, str] = data["documents"]
    missing = sorted(p for p in documents.values() if not Path(p).is_file())
    questions = [
        Question(q["question"], documents[q["document"]], tuple(q["pages"]))
        for q in data["questions"]
        if Path(documents[q["document"]]).is_file()
    ]
    return questions, missing


async def quality(path: Path | None, embedder: Embedder | None, model: str | None) -> list[dict[str, Any]]:
    """Recall@5 keyword and (with a model) hybrid over the question set's PDFs."""
    if path is None or not path.is_file():
        return [{"mode": "keyword", "skipped": f"no question set ({path})"}]
    questions, missing = load_questions(path)
    if not questions:
        return [{"mode": "keyword", "skipped": f"the question set's PDFs are missing: {', '.join(missing)}"}]
    rows = []
    with tempfile.TemporaryDirectory(prefix="llmw-bench-quality-") as folder:
        service = bench_service(Path(folder) / "quality.sqlite3", embedder, model)
        try:
            await service.index(sorted({q.path for q in questions}), "bench")
            found = [(await service.search_with_mode(q.text, None, RECALL_AT, "keyword"))[0] for q in questions]
            rows.append(_recall_row("keyword", questions, found))
            if embedder is None or model is None:
                rows.append({"mode": "hybrid", "skipped": NO_MODEL})
            else:
                rows.append(await _hybrid_recall(service, questions, model))
        finally:
            await service.close()
    for row in rows:
        row["missing_pdfs"] = missing
    return rows


async def _hybrid_recall(service: DocumentsService, questions: list[Question], model: str) -> dict[str, Any]:
    progress = await embedded(service)
    if progress.state != ev.EMBED_DONE:
        return {"mode": "hybrid", "skipped": f"embedding {progress.state}: {progress.reason}"}
    found, modes = [], set()
    for q in questions:
        hits, ranked_by = await service.search_with_mode(q.text, None, RECALL_AT, "hybrid")
        found.append(hits)
        modes.add(ranked_by)
    if modes != {"hybrid"}:
        return {"mode": "hybrid", "skipped": f"the service ranked by {', '.join(sorted(modes))}"}
    return _recall_row("hybrid", questions, found) | {"model": model}


def _recall_row(mode: str, questions: list[Question], found: list[list[Any]]) -> dict[str, Any]:
    hits = [any(h.path == q.path and h.page in q.pages for h in top) for q, top in zip(questions, found, strict=True)]
    misses = [q.text for q, hit in zip(questions, hits, strict=True) if not hit]
    return {
        "mode": mode,
        "questions": len(questions),
        "answered": sum(hits),
        f"recall_at_{RECALL_AT}": round(sum(hits) / len(questions), 3),
        "misses": misses,
    }


# --- the table -----------------------------------------------------------------------------------------------------
def text_report(result: DocsBenchResult) -> str:
    lines = ["Indexing", f"  {'corpus':<28} {'mode':<8} {'files':>5} {'pages':>6} {'MB':>6} {'s':>7} "
             f"{'pages/s':>8} {'MB/s':>6}"]  # fmt: skip
    for r in result.indexing:
        if r.get("skipped"):
            lines.append(f"  {r['corpus'][:28]:<28} {r['mode']:<8} skipped: {r['skipped']}")
            continue
        lines.append(
            f"  {r['corpus'][:28]:<28} {r['mode']:<8} {r['files']:>5} {r['pages']:>6} {r['mb']:>6.2f} "
            f"{r['seconds']:>7.2f} {r['pages_per_s']:>8.1f} {r['mb_per_s']:>6.3f}"
        )
    lines += ["", "Search latency (top 10)", f"  {'chunks':>8} {'mode':<8} {'p50 ms':>8} {'p95 ms':>8}"]
    for r in result.search:
        if r.get("skipped"):
            lines.append(f"  {r['chunks']:>8,} {r['mode']:<8} skipped: {r['skipped']}")
        else:
            lines.append(f"  {r['chunks']:>8,} {r['mode']:<8} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f}")
    lines += ["", f"Retrieval quality (recall@{RECALL_AT}, the page that answers)"]
    for r in result.quality:
        if r.get("skipped"):
            lines.append(f"  {r['mode']:<8} skipped: {r['skipped']}")
        else:
            lines.append(f"  {r['mode']:<8} {r[f'recall_at_{RECALL_AT}']:.3f} ({r['answered']}/{r['questions']})")
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)
