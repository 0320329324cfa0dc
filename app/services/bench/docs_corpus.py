"""The generated corpus of ``bench docs``: PDFs written with fpdf2 (the test/demo extra; without it the corpus is
text and Markdown only, and the result says so) and plain-text and Markdown files, from a seeded vocabulary with
Zipf-like word frequencies (``search_bench``'s), so every run indexes the same bytes."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.services.documents.search_bench import _words

PAGE_WORDS = 330  # about one printed A4 page of 11-point text


@dataclass(frozen=True)
class Corpus:
    folder: Path
    pdfs: int
    pdf_pages: int
    texts: int
    note: str | None = None  # why a part is missing


def _page(rng: random.Random, words: list[str], weights: list[float]) -> str:
    sentences = []
    remaining = PAGE_WORDS
    while remaining > 0:
        length = min(remaining, rng.randint(8, 20))
        sentences.append(" ".join(rng.choices(words, weights, k=length)).capitalize() + ".")
        remaining -= length
    return " ".join(sentences)


def _write_pdfs(folder: Path, pdfs: int, pages_per_pdf: int, page: Callable[[], str]) -> bool:
    """False when fpdf2 is not installed."""
    try:
        from fpdf import FPDF
    except ImportError:
        return False
    for number in range(pdfs):
        pdf = FPDF()
        pdf.set_font("Helvetica", size=11)
        for _ in range(pages_per_pdf):
            pdf.add_page()
            pdf.multi_cell(0, 5, page())
        pdf.output(str(folder / f"report{number:03}.pdf"))
    return True


def write_corpus(folder: Path, pdfs: int = 12, pages_per_pdf: int = 10, texts: int = 24, seed: int = 28) -> Corpus:
    """``pdfs`` PDFs of ``pages_per_pdf`` pages and ``texts`` text files (half .txt, half .md with headings, each
    about three pages long) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    words = _words(rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    note = None
    if pdfs and not _write_pdfs(folder, pdfs, pages_per_pdf, lambda: _page(rng, words, weights)):
        note = "no PDFs: fpdf2 is not installed (pip install fpdf2, or the app's test extra)"
        pdfs = 0
    for number in range(texts):
        pages = [_page(rng, words, weights) for _ in range(3)]
        if number % 2:
            body = "\n\n".join(f"## Section {n + 1}\n\n{text}" for n, text in enumerate(pages))
            (folder / f"notes{number:03}.md").write_text(f"# Notes {number}\n\n{body}\n", encoding="utf-8")
        else:
            (folder / f"notes{number:03}.txt").write_text("\n\n".join(pages) + "\n", encoding="utf-8")
    return Corpus(folder, pdfs, pdfs * pages_per_pdf, texts, note)
