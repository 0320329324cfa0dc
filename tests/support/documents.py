"""Real documents for the document-index tests: PDFs (fpdf2), an encrypted PDF (pypdf), DOCX (python-docx), and
the unreadable kinds a user's folder holds."""

from __future__ import annotations

import os
from pathlib import Path


def write_pdf(path: Path, pages: list[str]) -> Path:
    """A PDF with one page per item of ``pages`` (Helvetica, wrapped)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    pdf.output(str(path))
    return path


def write_encrypted_pdf(path: Path, source: Path, password: str = "s3cret") -> Path:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in PdfReader(source).pages:
        writer.add_page(page)
    writer.encrypt(user_password=password, owner_password=password, algorithm="AES-128")
    with open(path, "wb") as stream:
        writer.write(stream)
    return path


def write_corrupt_pdf(path: Path, source: Path) -> Path:
    """The first third of a real PDF: a header, no cross-reference table, no trailer."""
    data = source.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    return path


def write_docx(path: Path, sections: list[tuple[str, list[str]]]) -> Path:
    """A DOCX with a level-1 heading and its paragraphs per section."""
    import docx

    document = docx.Document()
    for heading, paragraphs in sections:
        document.add_heading(heading, level=1)
        for paragraph in paragraphs:
            document.add_paragraph(paragraph)
    document.save(str(path))
    return path


def write_unreadable_set(folder: Path) -> dict[str, str]:
    """An empty file, a binary named .txt and a symlink loop in ``folder``; {file name: the reason expected}."""
    (folder / "empty.md").write_bytes(b"")
    (folder / "binary.txt").write_bytes(bytes(range(256)) * 64)
    os.symlink("loop.txt", folder / "loop.txt")
    return {"empty.md": "empty file", "binary.txt": "binary content", "loop.txt": "symlink loop"}


def page_text(topic: str, words: int = 220) -> str:
    """Some sentences about ``topic`` (distinct per topic, so a search finds one page)."""
    sentences = [
        f"The {topic} section explains item {n} of the {topic} procedure in detail." for n in range(words // 12)
    ]
    return " ".join(sentences)
