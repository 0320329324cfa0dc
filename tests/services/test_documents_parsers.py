"""The parse worker, a real child process: each format's text, and each unreadable file's reason in words."""

from __future__ import annotations

import codecs
import os
from pathlib import Path

import pytest

from app.services.documents.failures import reason_for_os_error
from app.services.documents.parse_client import ParseWorker
from app.services.documents.text_decoding import decode_text
from tests.support.documents import page_text, write_corrupt_pdf, write_docx, write_encrypted_pdf, write_pdf


@pytest.fixture
def worker():
    parse_worker = ParseWorker(timeout_s=30.0, memory_bytes=2 * 2**30)
    yield parse_worker
    parse_worker.close()


def test_pdf_pages_are_numbered_from_one(tmp_path: Path, worker: ParseWorker) -> None:
    pdf = write_pdf(tmp_path / "three.pdf", [page_text("alpha"), page_text("bravo"), page_text("charlie")])
    outcome = worker.parse(pdf, "pdf")
    assert outcome.pages is not None and [p.page for p in outcome.pages] == [1, 2, 3]
    assert "bravo procedure" in outcome.pages[1].text and "alpha" not in outcome.pages[1].text


def test_encrypted_and_corrupt_pdfs_say_so(tmp_path: Path, worker: ParseWorker) -> None:
    pdf = write_pdf(tmp_path / "plain.pdf", [page_text("alpha")])
    encrypted = write_encrypted_pdf(tmp_path / "locked.pdf", pdf)
    corrupt = write_corrupt_pdf(tmp_path / "broken.pdf", pdf)
    assert worker.parse(encrypted, "pdf").reason == "encrypted PDF (it needs a password)"
    assert worker.parse(corrupt, "pdf").reason == "corrupt PDF (not a readable PDF file)"
    assert worker.parse(pdf, "pdf").pages  # the worker goes on after them


def test_docx_keeps_headings_with_their_offsets(tmp_path: Path, worker: ParseWorker) -> None:
    path = write_docx(tmp_path / "a.docx", [("Overview", ["The plan. It works."]), ("Risks", ["Rain is likely."])])
    (page,) = worker.parse(path, "docx").pages or []
    assert page.page is None
    assert [heading for _, heading in page.headings] == ["Overview", "Risks"]
    assert all(page.text[offset:].startswith(heading) for offset, heading in page.headings)
    assert "Rain is likely." in page.text


def test_corrupt_docx_says_so(tmp_path: Path, worker: ParseWorker) -> None:
    (tmp_path / "bad.docx").write_bytes(b"PK\x03\x04 not really a zip")
    assert (worker.parse(tmp_path / "bad.docx", "docx").reason or "").startswith("corrupt DOCX")


def test_html_drops_script_and_style_and_records_headings(tmp_path: Path, worker: ParseWorker) -> None:
    html = "<html><head><style>p{}</style></head><body><h1>Title</h1><script>var secret=1;</script><p>Body text.</p>"
    (tmp_path / "a.html").write_text(html)
    (page,) = worker.parse(tmp_path / "a.html", "html").pages or []
    assert page.text == "Title\n\nBody text." and page.headings == ((0, "Title"),)


def test_markdown_headings_outside_code_fences(tmp_path: Path, worker: ParseWorker) -> None:
    (tmp_path / "a.md").write_text("# Top\n\nText.\n\n```\n# not a heading\n```\n\n## Sub\n\nMore.\n")
    (page,) = worker.parse(tmp_path / "a.md", "markdown").pages or []
    assert [heading for _, heading in page.headings] == ["Top", "Sub"]


def test_text_encodings() -> None:
    assert decode_text("café".encode()) == "café"
    assert decode_text(codecs.BOM_UTF8 + "café".encode()) == "café"
    assert decode_text("café\r\nnaïve".encode("utf-16")) == "café\nnaïve"  # with its BOM
    assert decode_text("café".encode("latin-1")) == "café"


@pytest.mark.parametrize("data", [bytes(range(256)) * 8, b"\x7fELF\x02\x01" + b"\x00" * 100, bytes(range(1, 32)) * 50])
def test_binary_content_is_not_text(data: bytes) -> None:
    from app.services.documents.failures import UnreadableFile

    with pytest.raises(UnreadableFile, match="binary content"):
        decode_text(data)


def test_a_parse_that_runs_past_the_time_bound_is_stopped_and_the_next_file_parses(tmp_path: Path) -> None:
    (tmp_path / "huge.html").write_text("<div><p>word <b>x</b></p></div>" * 300_000)  # seconds of html.parser
    (tmp_path / "small.txt").write_text("Small file.")
    worker = ParseWorker(timeout_s=0.3, memory_bytes=2 * 2**30)
    try:
        assert worker.parse(tmp_path / "huge.html", "html").reason == "timed out after 0.3 s (the parser was stopped)"
        assert (worker.parse(tmp_path / "small.txt", "text").pages or [])[0].text == "Small file."
    finally:
        worker.close()


def test_a_parser_that_crashes_mid_file_is_reported_and_replaced(tmp_path: Path, worker: ParseWorker) -> None:
    import threading

    (tmp_path / "huge.html").write_text("<div><p>word <b>x</b></p></div>" * 300_000)
    (tmp_path / "a.txt").write_text("Text.")
    worker.parse(tmp_path / "a.txt", "text")
    assert worker._proc is not None
    # what a segfault in native parser code looks like from here: the worker dies while it parses
    threading.Timer(0.3, os.kill, (worker._proc.pid, 9)).start()
    reason = worker.parse(tmp_path / "huge.html", "html").reason
    assert reason is not None and reason.startswith("the parser crashed (killed by SIGKILL"), reason
    assert worker.parse(tmp_path / "a.txt", "text").pages


def test_the_memory_bound_applies_to_the_worker(tmp_path: Path) -> None:
    """A 60 MB text file under a 150 MiB address-space cap: the bytes, their text and its copies do not fit."""
    (tmp_path / "big.txt").write_text("lorem ipsum dolor sit amet. " * 2_150_000)
    worker = ParseWorker(timeout_s=120.0, memory_bytes=150 * 2**20)
    try:
        reason = worker.parse(tmp_path / "big.txt", "text").reason
    finally:
        worker.close()
    assert reason == "ran out of memory (the limit is 150 MiB)"


def test_os_errors_become_reasons() -> None:
    import errno

    assert reason_for_os_error(PermissionError(errno.EACCES, "Permission denied")) == "permission denied"
    assert reason_for_os_error(OSError(errno.ELOOP, "Too many levels of symbolic links")) == "symlink loop"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file without read permission")
def test_a_file_without_read_permission_is_permission_denied(tmp_path: Path, worker: ParseWorker) -> None:
    path = tmp_path / "secret.txt"
    path.write_text("hidden")
    path.chmod(0)
    assert worker.parse(path, "text").reason == "permission denied"
