"""``llm-workstation bench render``: what one streaming flush costs while a table grows, and a huge table once.

A real :class:`~app.ui.pages.chat.transcript.ChatView`, shown (on Qt's offscreen platform unless
``QT_QPA_PLATFORM`` says otherwise) below a history taller than it, receives a reply that is one long table, one
row per flush; a flush's cost is the time of ``flush()`` plus the events it causes (layout, paint), median of
``samples`` flushes at each size. Also timed: a flush while a table is still short enough to be live, the flush
that ends a long table (rendered once: as text, and at the largest size laid out as a table), and showing a
5000×50 table once. With ``compare`` the row flushes are also timed with every table kept live and laid out
(re-rendered whole on every flush), as before long tables streamed as text.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.core.chat.conversation import Message
    from app.ui.pages.chat.transcript import ChatView

FLUSH_ROWS = (20, 100, 400)
BIG_TABLE = (5000, 50)
COLUMNS = 6


def table_head(columns: int) -> str:
    return "| " + " | ".join(f"Column {j}" for j in range(columns)) + " |\n|" + "---|" * columns + "\n"


def table_row(i: int, columns: int) -> str:
    cells = [f"row {i} **bold**", f"`code {i}`", *(f"{i * j / 7:.3f}" for j in range(2, columns))]
    return "| " + " | ".join(cells[:columns]) + " |\n"


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1e3


@contextlib.contextmanager
def _as_before() -> Iterator[None]:
    """Streams started meanwhile keep every table live and render it whole, as before tables streamed as text."""
    from app.core import markdown_tables
    from app.core.chat.markdown import MarkdownStream

    saved = MarkdownStream.live_table_rows, markdown_tables.MAX_TABLE_CELLS
    MarkdownStream.live_table_rows = markdown_tables.MAX_TABLE_CELLS = 10**9
    try:
        yield
    finally:
        MarkdownStream.live_table_rows, markdown_tables.MAX_TABLE_CELLS = saved


def _history() -> list[Message]:
    from app.core.chat.conversation import Message, Role

    earlier = "\n\n".join(f"Paragraph {i} of an earlier answer, long enough to wrap once or twice." for i in range(40))
    return [
        Message(Role.USER, "Explain something."),
        Message(Role.ASSISTANT, earlier),
        Message(Role.USER, "Now a long table, please."),
    ]


def _streaming_view(columns: int) -> ChatView:
    """A shown chat view with a history taller than it, streaming a reply that has begun a table."""
    from app.ui.pages.chat.transcript import ChatView

    view = ChatView()
    view.resize(900, 700)
    view.show()
    view.show_messages(_history())  # it scrolls from the first flush on, as in a chat
    view.begin_reply()
    view.append_reply("Here it is:\n\n" + table_head(columns))
    return view


def _live_flush(samples: int, columns: int) -> float:
    """A flush while the last row a table keeps live is written, a few characters at a time."""
    from PySide6.QtWidgets import QApplication

    from app.core.chat.markdown import LIVE_TABLE_ROWS

    view = _streaming_view(columns)
    view.append_reply("".join(table_row(i, columns) for i in range(LIVE_TABLE_ROWS - 1)))
    view.flush()
    QApplication.processEvents()
    row = table_row(LIVE_TABLE_ROWS - 1, columns)
    size = max(1, len(row) // samples)
    pieces = iter([row[i : i + size] for i in range(0, len(row) - 1, size)][:samples])

    def add_piece() -> None:
        view.append_reply(next(pieces))
        view.flush()
        QApplication.processEvents()

    cost = statistics.median(_timed(add_piece) for _ in range(min(samples, len(row) // size)))
    view.end_reply()
    view.close()
    return cost


def _flush_costs(rows: tuple[int, ...], samples: int, columns: int) -> dict[str, Any]:
    """Stream a table row by row; at each size, time ``samples`` one-row flushes. Then time the table's end."""
    from PySide6.QtWidgets import QApplication

    view = _streaming_view(columns)
    count = 0

    def add_rows(n: int = 1) -> None:
        nonlocal count
        view.append_reply("".join(table_row(i, columns) for i in range(count, count + n)))
        count += n
        view.flush()
        QApplication.processEvents()

    def end_table() -> None:
        view.append_reply("\nThat is all.\n")
        view.flush()
        QApplication.processEvents()

    costs: dict[str, float] = {}
    for size in rows:
        while count < size:
            add_rows(min(25, size - count))  # not measured: up to the size in a few flushes
        costs[str(size)] = statistics.median(_timed(add_rows) for _ in range(samples))
    complete = _timed(end_table)
    view.end_reply()
    view.close()
    return {"flush_ms": costs, "table_complete_ms": complete, "rows_at_end": count}


def _big_table(rows: int, columns: int) -> dict[str, float]:
    """Show a reply holding a ``rows`` × ``columns`` table, once; and the Markdown step alone."""
    from PySide6.QtWidgets import QApplication

    from app.core.chat.conversation import Message, Role
    from app.core.chat.markdown import render_markdown
    from app.ui.pages.chat.transcript import ChatView

    text = table_head(columns) + "".join(table_row(i, columns) for i in range(rows))
    markdown_ms = _timed(lambda: render_markdown(text))
    view = ChatView()
    view.resize(900, 700)
    view.show()
    QApplication.processEvents()

    def show() -> None:
        view.show_messages([Message(Role.ASSISTANT, text)])
        QApplication.processEvents()

    shown_ms = _timed(show)
    view.close()
    return {"shown_ms": shown_ms, "markdown_ms": markdown_ms, "chars": len(text)}


def bench_render(
    rows: tuple[int, ...] = FLUSH_ROWS,
    big: tuple[int, int] = BIG_TABLE,
    samples: int = 15,
    compare: bool = False,
    columns: int = COLUMNS,
) -> dict[str, Any]:
    """The figures of ``bench render`` (milliseconds)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from app.core.chat.markdown import LIVE_TABLE_ROWS
    from app.core.markdown_tables import MAX_TABLE_CELLS

    _app = QApplication.instance() or QApplication([])
    live = _live_flush(samples, columns)
    streamed = _flush_costs(rows, samples, columns)
    largest = MAX_TABLE_CELLS // columns - 1  # body rows of the largest table still laid out as a table
    formatted = _flush_costs((largest - 1,), 1, columns)  # one measured flush adds the last row
    flush = streamed["flush_ms"]
    report: dict[str, Any] = {
        "columns": columns,
        "samples": samples,
        "live_table_rows": LIVE_TABLE_ROWS,
        "live_flush_ms": live,
        "flush_ms": flush,
        "ratio_last_first": flush[str(rows[-1])] / flush[str(rows[0])],
        "table_complete_ms": streamed["table_complete_ms"],
        "table_complete_rows": streamed["rows_at_end"],
        "formatted_complete_ms": formatted["table_complete_ms"],
        "formatted_complete_rows": formatted["rows_at_end"],
        "big_table": {"rows": big[0], "columns": big[1], **_big_table(*big)},
    }
    if compare:
        with _as_before():
            before = _flush_costs(rows, max(3, samples // 3), columns)["flush_ms"]
        report["rerender_flush_ms"] = before
        report["rerender_ratio_last_first"] = before[str(rows[-1])] / before[str(rows[0])]
    return report


def report_lines(r: dict[str, Any]) -> list[str]:
    flush = r["flush_ms"]
    sizes = list(flush)
    big = r["big_table"]
    lines = [
        f"streaming flush, one row of a {r['columns']}-column table added (median of {r['samples']}):",
        f"  {r['live_table_rows']:>5} rows (live table)  : {r['live_flush_ms']:8.2f} ms   (a part of row 10 added)",
    ]
    lines += [f"  {size:>5} rows               : {flush[size]:8.2f} ms" for size in sizes]
    lines.append(f"ratio {sizes[-1]}/{sizes[0]} rows           : {r['ratio_last_first']:8.2f}      (target <= 2)")
    if "rerender_flush_ms" in r:
        before = r["rerender_flush_ms"]
        lines.append("whole-table re-render per flush (long tables kept live, for comparison):")
        lines += [f"  {size:>5} rows               : {before[size]:8.2f} ms" for size in sizes]
        lines.append(f"ratio {sizes[-1]}/{sizes[0]} rows           : {r['rerender_ratio_last_first']:8.2f}")
    lines += [
        f"table complete, {r['table_complete_rows']} rows (as text): {r['table_complete_ms']:.1f} ms",
        f"table complete, {r['formatted_complete_rows']} rows (laid out): {r['formatted_complete_ms']:.1f} ms",
        f"{big['rows']}×{big['columns']} table shown once  : {big['shown_ms']:.1f} ms "
        f"(Markdown step {big['markdown_ms']:.1f} ms, {big['chars']:,} characters)",
    ]
    return lines
