"""Syntax colours for code blocks (Pygments), as HTML spans with classes and a style sheet per palette.

The spans carry classes (``hl-k``, ``hl-s``, ...), never colours, so one rendering serves both palettes: the
colours come from :func:`highlight_css`, whose every colour is checked against the code background and darkened
or lightened until it reads (WCAG contrast 4.5:1). The lexer comes from the fence's language (```` ```python ````);
an unlabelled block is not guessed at. Results are cached per block.

Loading Pygments and a lexer costs 5-30 ms once: :func:`prepare` loads the common ones off the GUI thread at
start-up, so the view rarely pays it.
"""

from __future__ import annotations

import functools
import html
import threading
from typing import Any

from app.core.chat.code_colours import DARK, LIGHT

CLASS_PREFIX = "hl-"
MAX_CODE_CHARS = 12_000  # a longer block is shown plain: Pygments takes ~2 ms per 1,000 characters
MAX_NAME = 32  # a fence's language longer than this is no language Pygments knows
MIN_CONTRAST = 4.5
LIGHT_STYLE, DARK_STYLE = "default", "github-dark"
COMMON_LANGUAGES = (
    "python", "javascript", "typescript", "bash", "json", "c", "cpp", "rust", "go", "java", "html", "css", "sql",
    "yaml", "toml", "diff",
)  # fmt: skip

_lock = threading.Lock()
_lexers: dict[str, Any] = {}  # language -> lexer, or None when Pygments has none by that name


def prepare(languages: tuple[str, ...] = COMMON_LANGUAGES) -> None:
    """Load Pygments and the lexers of ``languages`` (for a worker thread: it takes ~100 ms); any other language's
    lexer loads when first needed (5-20 ms, once)."""
    for language in languages:
        _lexer(language, load=True)
    _formatter()


def highlight(code: str, language: str, *, load: bool = True) -> str | None:
    """``code`` as escaped HTML with coloured spans; None when ``language`` is unknown (or, without ``load``, not
    loaded yet), or the block is too long."""
    name = language.strip().lower()
    if not name or len(name) > MAX_NAME or len(code) > MAX_CODE_CHARS or _lexer(name, load) is None:
        return None
    return _highlighted(code, name)


def _lexer(name: str, load: bool) -> Any:
    if name in _lexers or not load:
        return _lexers.get(name)
    with _lock:
        if name not in _lexers:
            from pygments.lexers import get_lexer_by_name
            from pygments.util import ClassNotFound

            try:
                _lexers[name] = get_lexer_by_name(name, stripnl=False, ensurenl=False)
            except ClassNotFound:
                _lexers[name] = None
    return _lexers[name]


@functools.lru_cache(maxsize=1024)
def _highlighted(code: str, name: str) -> str:
    from pygments import highlight as pygmentize

    return pygmentize(code, _lexers[name], _formatter()).removesuffix("\n")


@functools.cache
def _formatter() -> Any:
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(nowrap=True, classprefix=CLASS_PREFIX)


@functools.cache
def highlight_css(dark: bool, background: str) -> str:
    """CSS rules for the spans (Qt's HTML subset: colour, weight, italics), readable on ``background``
    (``#rrggbb``). Pygments is not imported: the styles' colours are in :mod:`app.core.chat.code_colours`."""
    rules = []
    for short, (color, bold, italic) in (DARK if dark else LIGHT).items():
        parts = [f"color: {readable(color, background)};"] if color else []
        if bold:
            parts.append("font-weight: 600;")
        if italic:
            parts.append("font-style: italic;")
        rules.append(f"span.{CLASS_PREFIX}{short} {{ {' '.join(parts)} }}")
    return "\n".join(rules)


def style_table(name: str) -> dict[str, tuple[str, bool, bool]]:
    """A Pygments style as ``code_colours`` holds it (short class -> colour, bold, italic)."""
    from pygments.styles import get_style_by_name
    from pygments.token import STANDARD_TYPES

    style = get_style_by_name(name)
    table = {}
    for token, short in STANDARD_TYPES.items():
        spec = style.style_for_token(token)
        if short and (spec["color"] or spec["bold"] or spec["italic"]):
            table[short] = (spec["color"] or "", bool(spec["bold"]), bool(spec["italic"]))
    return table


def readable(color: str, background: str) -> str:
    """``color`` (hex, without or with ``#``), moved towards black or white until it reads on ``background``."""
    rgb = _rgb(color)
    back = _rgb(background)
    target = (0, 0, 0) if _luminance(back) > 0.4 else (255, 255, 255)
    step = 0
    while contrast(rgb, back) < MIN_CONTRAST and step < 20:
        step += 1
        rgb = tuple(round(c + (t - c) * 0.15) for c, t in zip(rgb, target, strict=True))  # type: ignore[assignment]
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """The WCAG contrast ratio of two colours (1 to 21)."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def _rgb(color: str) -> tuple[int, int, int]:
    text = color.lstrip("#")
    if len(text) == 3:
        text = "".join(ch * 2 for ch in text)
    return int(text[0:2], 16), int(text[2:4], 16), int(text[4:6], 16)


def _luminance(rgb: tuple[int, int, int]) -> float:
    def channel(value: int) -> float:
        c = value / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(v) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def plain(code: str) -> str:
    """A block's HTML when it is not highlighted."""
    return html.escape(code)
