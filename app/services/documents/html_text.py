"""The visible text of an HTML page (stdlib ``html.parser``): script, style and the like dropped, block elements on
their own lines, h1–h6 recorded as headings."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from app.core.documents.chunking import PageText

_SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head"})
_BLOCKS = frozenset(
    [
        "p",
        "div",
        "br",
        "li",
        "ul",
        "ol",
        "tr",
        "table",
        "section",
        "article",
        "header",
        "footer",
        "nav",
        "aside",
        "main",
        "pre",
        "blockquote",
        "dt",
        "dd",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "title",
        "hr",
    ]
)
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_SPACES = re.compile(r"[ \t\r\f\v]+")


class _TextCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.length = 0
        self.headings: list[tuple[int, str]] = []
        self._skip_depth = 0
        self._heading: list[str] | None = None
        self._heading_at = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self._skip_depth += 1
        elif tag in _BLOCKS:
            self._newline()
            if tag in _HEADINGS:
                self._heading, self._heading_at = [], self.length

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self._skip_depth = max(0, self._skip_depth - 1)
        elif tag in _BLOCKS:
            if tag in _HEADINGS and self._heading is not None:
                self._end_heading()
            self._newline()

    def handle_data(self, data: str) -> None:
        if self._skip_depth:
            return
        text = _SPACES.sub(" ", data.replace("\n", " "))
        if not text.strip() and (not self.parts or self.parts[-1].endswith("\n")):
            return
        if self._heading is not None:
            self._heading.append(text)
        self._append(text)

    def _end_heading(self) -> None:
        heading = "".join(self._heading or []).strip()
        self._heading = None
        if heading:
            self.headings.append((self._heading_at, heading))

    def _newline(self) -> None:
        if self.parts and not self.parts[-1].endswith("\n\n"):
            self._append("\n\n" if not self.parts[-1].endswith("\n") else "\n")

    def _append(self, text: str) -> None:
        self.parts.append(text)
        self.length += len(text)


def html_to_page(html: str) -> PageText:
    collector = _TextCollector()
    collector.feed(html)
    collector.close()
    raw = "".join(collector.parts)
    stripped = raw.lstrip()
    shift = len(raw) - len(stripped)
    headings = tuple((max(0, offset - shift), heading) for offset, heading in collector.headings)
    return PageText(stripped.rstrip(), None, headings)
