"""The generated corpus of ``bench docs``: PDFs written with fpdf2 (the test/demo extra; without it the corpus is
text and Markdown only, and the result says so) and plain-text and Markdown files, seeded, with Zipf-like word
frequencies over real English words: the most frequent words of the standard library's own sources (the same for
one Python version everywhere). Real words matter to the embedding rate: ``search_bench``'s made-up words split into
four or five WordPiece tokens each, twice the tokens of real text."""

from __future__ import annotations

import random
import re
import sysconfig
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PAGE_WORDS = 330  # about one printed A4 page of 11-point text
VOCABULARY = 4000


def english_words(count: int = VOCABULARY) -> list[str]:
    """The ``count`` most frequent words (3 to 12 lowercase letters) of the standard library's top-level modules,
    most frequent first."""
    counts: Counter[str] = Counter()
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        counts.update(re.findall(r"\b[a-z]{3,12}\b", path.read_text(encoding="utf-8", errors="replace")))
    return [word for word, _ in counts.most_common(count)]


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
    words = english_words()
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
