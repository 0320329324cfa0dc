"""The document indexer with the real parse worker and the real SQLite store: unreadable files get their reason and
the rest is indexed; unchanged files are never read again; changed, deleted, cancelled, paused; search finds pages."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from app.services.documents import events as ev
from app.services.documents.indexer import DocumentIndexer, IndexLimits
from app.services.documents.store import DocumentStore
from tests.support.documents import (
    page_text,
    write_corrupt_pdf,
    write_docx,
    write_encrypted_pdf,
    write_pdf,
    write_unreadable_set,
)
from tests.support.waiting import until


class Recorder:
    def __init__(self) -> None:
        self.events: list[ev.FileEvent | ev.IndexTotals] = []

    def __call__(self, event: ev.FileEvent | ev.IndexTotals) -> None:
        self.events.append(event)

    def kinds(self, kind: str) -> list[str]:
        return [Path(e.path).name for e in self.events if isinstance(e, ev.FileEvent) and e.kind == kind]

    def reasons(self) -> dict[str, str | None]:
        return {Path(e.path).name: e.reason for e in self.events if isinstance(e, ev.FileEvent) and e.kind == "failed"}


@pytest.fixture
def store(tmp_path: Path):
    document_store = DocumentStore(tmp_path / "documents.sqlite3")
    yield document_store
    document_store.close()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def indexer(store: DocumentStore, recorder: Recorder):
    document_indexer = DocumentIndexer(store, IndexLimits(parse_timeout_s=60.0), recorder)
    yield document_indexer
    document_indexer.close()


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    write_pdf(folder / "manual.pdf", [page_text("alpha"), page_text("bravo"), page_text("zebra")])
    write_docx(folder / "sub" / "plan.docx", [("Budget", ["The budget is tight. Costs rise."])])
    (folder / "notes.md").write_text("# Notes\n\nRemember the quokka.\n")
    (folder / "page.html").write_text("<h1>Web</h1><script>ignored()</script><p>A heron stands still.</p>")
    (folder / "tool.py").write_text("def walrus():\n    return 'walrus'\n")
    (folder / "image.png").write_bytes(b"\x89PNG....")  # not a document type: not found at all
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD.txt").write_text("ignored folder")
    (folder / "node_modules").mkdir()
    (folder / "node_modules" / "x.md").write_text("ignored folder")
    return folder


def test_a_folder_is_indexed_and_each_unreadable_file_gets_its_reason(
    tmp_path: Path, store: DocumentStore, indexer: DocumentIndexer, recorder: Recorder
) -> None:
    folder = _folder(tmp_path)
    expected = write_unreadable_set(folder)
    write_encrypted_pdf(folder / "locked.pdf", folder / "manual.pdf")
    write_corrupt_pdf(folder / "broken.pdf", folder / "manual.pdf")
    expected |= {"locked.pdf": "encrypted PDF", "broken.pdf": "corrupt PDF"}
    totals = indexer.add([str(folder)])
    indexed = {"manual.pdf", "plan.docx", "notes.md", "page.html", "tool.py"}
    assert set(recorder.kinds("indexed")) == indexed
    reasons = recorder.reasons()
    assert set(reasons) == set(expected)
    assert all(expected[name] in (reason or "") for name, reason in reasons.items())
    assert (totals.found, totals.indexed, totals.failed) == (len(indexed) + len(expected), 5, len(expected))
    records = {Path(r.path).name: r for r in store.files()}
    assert records["manual.pdf"].pages == 3 and records["notes.md"].pages is None
    assert records["binary.txt"].state == "failed" and records["binary.txt"].reason == "binary content, not text"
    assert isinstance(totals, ev.IndexTotals) and recorder.events[-1] == totals


def test_search_finds_the_right_page_heading_and_snippet(tmp_path: Path, store: DocumentStore, indexer) -> None:
    indexer.add([str(_folder(tmp_path))])
    (hit,) = store.search("zebra procedure", top=1)
    assert (Path(hit.path).name, hit.page, hit.score > 0) == ("manual.pdf", 3, True)
    assert "[zebra]" in hit.snippet
    (docx_hit,) = store.search("budget", top=1)
    assert (Path(docx_hit.path).name, docx_hit.page, docx_hit.heading) == ("plan.docx", None, "Budget")
    assert store.search("script ignored") == []  # an HTML script's text is not indexed
    assert store.search('quokka" OR (NEAR* title:') and store.search("((( ***") == []
    hits = store.search("procedure", top=3)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_unchanged_files_are_not_read_again(tmp_path: Path, indexer: DocumentIndexer, recorder: Recorder) -> None:
    folder = _folder(tmp_path)
    indexer.add([str(folder)])
    recorder.events.clear()
    totals = indexer.add([str(folder)])
    assert recorder.kinds("started") == [] and totals.unchanged == totals.found == 5
    os.utime(folder / "notes.md", ns=(1, 1))  # a new mtime, the same bytes: the hash says unchanged
    recorder.events.clear()
    indexer.add([str(folder)])
    assert recorder.kinds("started") == [] and "notes.md" in recorder.kinds("unchanged")


def test_a_late_cancel_of_an_ended_run_does_not_reach_the_next(tmp_path: Path, indexer: DocumentIndexer) -> None:
    folder = _folder(tmp_path)
    run = indexer.stop_soon()  # a Cancel asked as a run ended; its kill comes late, from another thread
    totals = indexer.add([str(folder)])  # the next run begins afresh
    assert not totals.cancelled and totals.found == 5
    worker = indexer._worker._proc
    assert worker is not None and worker.poll() is None  # the parse child of the last run, still up
    indexer.kill_parse(run)  # the late kill: not this run's
    assert indexer._worker._proc is worker and worker.poll() is None
    indexer.kill_parse(indexer.stop_soon())  # this run's own cancel kills it
    assert indexer._worker._proc is None and worker.poll() is not None


def test_a_changed_file_is_reindexed_and_a_deleted_one_dropped(
    tmp_path: Path, store: DocumentStore, indexer: DocumentIndexer, recorder: Recorder
) -> None:
    folder = _folder(tmp_path)
    indexer.add([str(folder)])
    (folder / "notes.md").write_text("# Notes\n\nNow about the pangolin instead.\n")
    (folder / "tool.py").unlink()
    recorder.events.clear()
    totals = indexer.add([str(folder)])
    assert recorder.kinds("indexed") == ["notes.md"] and recorder.kinds("removed") == ["tool.py"]
    assert (totals.indexed, totals.removed) == (1, 1)
    assert store.search("quokka") == [] and store.search("walrus") == []
    assert Path(store.search("pangolin")[0].path).name == "notes.md"
    assert "tool.py" not in {Path(r.path).name for r in store.files()}
    assert indexer.rescan().unchanged == 4


def test_cancel_kills_the_parse_in_flight_and_commits_nothing_of_it(
    tmp_path: Path, store: DocumentStore, recorder: Recorder
) -> None:
    (tmp_path / "a.txt").write_text("First file.")
    (tmp_path / "b.html").write_text("<div><p>word <b>x</b></p></div>" * 300_000)  # seconds to parse
    (tmp_path / "c.txt").write_text("Last file.")
    indexer = DocumentIndexer(store, IndexLimits(parse_timeout_s=60.0), recorder)
    started = threading.Event()
    indexer.subscribe(lambda e: started.set() if getattr(e, "path", "").endswith("b.html") else None)
    worker = threading.Thread(target=indexer.add, args=([str(tmp_path)],))
    worker.start()
    assert started.wait(30)
    indexer.cancel()
    worker.join(10)
    indexer.close()
    assert not worker.is_alive()
    totals = recorder.events[-1]
    assert isinstance(totals, ev.IndexTotals) and totals.cancelled and totals.indexed == 1
    states = {Path(r.path).name: r.state for r in store.files()}
    assert states == {"a.txt": "indexed", "b.html": "pending"}


def test_pause_holds_before_the_next_file_and_resume_goes_on(
    tmp_path: Path, store: DocumentStore, recorder: Recorder
) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.txt").write_text(f"File {name}.")
    indexer = DocumentIndexer(store, listener=recorder)
    indexer.subscribe(lambda e: indexer.pause() if getattr(e, "kind", "") == "indexed" else None)

    async def scenario() -> None:
        task = asyncio.ensure_future(indexer.index([str(tmp_path)]))
        await until(lambda: len(recorder.kinds("indexed")) == 1 and indexer.paused)
        assert not task.done()
        indexer.resume()
        await until(lambda: len(recorder.kinds("indexed")) == 2 and indexer.paused)
        indexer.resume()
        await until(lambda: len(recorder.kinds("indexed")) == 3 and indexer.paused)
        indexer.resume()
        totals = await asyncio.wait_for(task, 30)
        assert totals.indexed == 3

    try:
        asyncio.run(scenario())
    finally:
        indexer.close()


def test_a_parse_past_the_time_bound_fails_that_file_only(tmp_path: Path, store: DocumentStore, recorder) -> None:
    (tmp_path / "a.txt").write_text("Before.")
    (tmp_path / "b.html").write_text("<div><p>word <b>x</b></p></div>" * 300_000)
    (tmp_path / "c.txt").write_text("After.")
    indexer = DocumentIndexer(store, IndexLimits(parse_timeout_s=0.5), recorder)
    try:
        indexer.add([str(tmp_path)])
    finally:
        indexer.close()
    assert recorder.reasons() == {"b.html": "timed out after 0.5 s (the parser was stopped)"}
    assert recorder.kinds("indexed") == ["a.txt", "c.txt"]


def test_too_large_and_unsupported_named_files(tmp_path: Path, store: DocumentStore, recorder: Recorder) -> None:
    (tmp_path / "big.txt").write_text("x. " * 2000)
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8")
    indexer = DocumentIndexer(store, IndexLimits(max_file_bytes=1000), recorder)
    try:
        indexer.add([str(tmp_path / "big.txt"), str(tmp_path / "photo.jpg")])
    finally:
        indexer.close()
    assert recorder.reasons() == {
        "big.txt": "too large (5.9 KiB; the limit is 1000 B)",
        "photo.jpg": "not a file type it reads (photo.jpg)",
    }


def test_the_store_is_owner_only_and_chunk_ids_key_the_fts_index(tmp_path: Path, store, indexer) -> None:
    indexer.add([str(_folder(tmp_path))])
    assert (store.path.stat().st_mode & 0o777) == 0o600
    with sqlite3.connect(store.path) as db:
        chunks = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
        fts = db.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
        total = db.execute("SELECT sum(chunk_count) FROM files").fetchone()[0]
        assert chunks == fts == total > 0
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.remove_path(str(tmp_path / "docs" / "sub")) == 1 and store.search("budget") == []


def test_the_type_filter_and_ignored_folders(tmp_path: Path, store: DocumentStore, recorder: Recorder) -> None:
    from app.core.documents.file_types import parse_extensions

    folder = _folder(tmp_path)
    indexer = DocumentIndexer(store, listener=recorder)
    try:
        totals = indexer.add([str(folder)], "only-md", parse_extensions("md,pdf"))
    finally:
        indexer.close()
    assert sorted(recorder.kinds("indexed")) == ["manual.pdf", "notes.md"] and totals.found == 2
    assert {r.collection for r in store.files()} == {"only-md"}  # .git/ and node_modules/ were never entered


def test_a_rescan_drops_the_files_of_a_folder_that_is_gone(tmp_path: Path, store: DocumentStore, indexer) -> None:
    import shutil

    folder = _folder(tmp_path)
    link = tmp_path / "link-to-docs"
    link.symlink_to(folder, target_is_directory=True)
    indexer.add([str(link)])
    assert len(store.files()) == 5  # a link to a folder given as the root is followed
    shutil.rmtree(folder)
    totals = indexer.rescan()
    assert (totals.removed, store.files(), store.chunk_count()) == (5, [], 0)
