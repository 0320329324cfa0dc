"""Theme switches in a window that has shown every page, and what the transcript looks like after each.

Used in-process by the offscreen tests and as a program in a real X window (``python -m tests.support.theme_probe
RESULT.json SHOTS_DIR``, with ``LLMW_HOME`` and a model folder in ``LLMW_PROBE_MODELS``), so that a crash is a
dead process, not a dead test run. The window is built as ``app.ui.app.run_gui`` builds it: the palette first, the
style sheet once the window exists."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

from app.core.chat.conversation import Message, ReplyStats, Role
from tests.support.waiting import until

CHAT = [
    Message(Role.USER, "What does the KV cache hold?\nIn a few words."),
    Message(
        Role.ASSISTANT,
        "It holds the **keys and values** of every token seen so far, so the model does not compute them again.\n\n"
        "```python\ncache = {}\n```\n\n- one\n- two",
        stats=ReplyStats(completion_tokens=30, decode_tokens_per_s=12.5),
        model="tiny",
    ),
    Message(Role.USER, "And when it is full?"),
    Message(Role.ASSISTANT, "The oldest tokens are dropped, or the chat stops: a setting says which."),
]


async def show_every_page(window) -> None:
    """Open every page and sub-tab once, let each start, and leave the Library with its first model chosen and
    the chat showing ``CHAT``."""
    from app.ui.page import Page
    from app.ui.page_paths import ALIASES, PAGE_PATHS

    for path in PAGE_PATHS:
        if path in ALIASES:
            continue
        page = window.open_path(path)
        if isinstance(page, Page) and isinstance(started := page.start(), asyncio.Future):
            with contextlib.suppress(Exception):  # a page that cannot start here (no vLLM) is still shown
                await asyncio.wait_for(asyncio.shield(started), 15)
        await asyncio.sleep(0)
    library = window.models_panel
    window.open_path("models/library")
    await until(lambda: library.last_scan is not None and library.proxy.rowCount() > 0)
    library.table.selectRow(0)
    await until(lambda: library.details is not None)
    window.open_path("chat")
    window.chat_panel.show_transcript(True)
    window.chat_panel.view.show_messages(CHAT)


async def switch_theme(window, theme: str) -> None:
    """Choose ``theme`` in Settings → General as a person would (no Save), and wait until it is applied."""
    from PySide6.QtWidgets import QApplication

    from app.ui.style.theme import is_dark

    page = window.open_path("settings")
    page.show_section("General")
    page.general.theme.setCurrentText(theme.title())
    await until(lambda: not page.theme_pending() and is_dark(QApplication.palette()) == (theme == "dark"))
    window.open_path("chat")
    view = window.chat_panel.view
    await until(lambda: view.isVisible() and not view.restyle_pending())  # the transcript has followed it


def transcript_colours(view) -> dict[str, float]:
    """The transcript viewport's background lightness (its most common colour) and the share of its other,
    contrasting pixels (the text) that are lighter than the background."""
    image = view.viewport().grab().toImage()
    counts: Counter[int] = Counter()
    for y in range(0, image.height(), 2):
        for x in range(0, image.width(), 2):
            counts[image.pixel(x, y)] += 1
    background = counts.most_common(1)[0][0]
    from PySide6.QtGui import QColor

    base = QColor(background).lightness()
    ink = [(QColor(rgb).lightness(), n) for rgb, n in counts.items() if abs(QColor(rgb).lightness() - base) > 90]
    total = sum(n for _, n in ink)
    lighter = sum(n for lightness, n in ink if lightness > base)
    return {"background": base, "ink_pixels": total, "lighter_share": lighter / total if total else 0.0}


def other_colours(window) -> dict[str, object]:
    """What else caches colours: each chart's background lightness, and the lightest pixel of the Chat page's
    navigation icon."""
    from PySide6.QtGui import QColor

    from app.ui.pages.bench.chart import BenchChart
    from app.ui.widgets.timeseries_chart import ChartWidget

    charts = [*window.findChildren(ChartWidget), *window.findChildren(BenchChart)]
    backgrounds = [QColor(chart.grab().toImage().pixel(1, 1)).lightness() for chart in charts]
    pixmap = window.nav.item(0).icon().pixmap(20).toImage()
    ink = [pixmap.pixelColor(x, y) for x in range(pixmap.width()) for y in range(pixmap.height())]
    icon = max((c.lightness() for c in ink if c.alpha() > 200), default=-1)
    return {"charts": backgrounds, "nav_icon": icon}


async def switch_many(window, times: int, shots: Path | None = None) -> list[dict[str, object]]:
    """Switch ``times`` times, dark first, alternating; the transcript's colours after each."""
    results: list[dict[str, object]] = []
    for turn in range(times):
        theme = "dark" if turn % 2 == 0 else "light"
        await switch_theme(window, theme)
        view = window.chat_panel.view
        if shots is not None:
            view.viewport().grab().save(str(shots / f"transcript-{turn:02d}-{theme}.png"))
            window.grab().save(str(shots / f"window-{turn:02d}-{theme}.png"))
        results.append({"theme": theme, **transcript_colours(view), **other_colours(window)})
    return results


def main(result_file: Path, shots: Path) -> int:
    import qasync
    from PySide6.QtWidgets import QApplication

    from app.services.logbuffer import install_logging
    from app.services.paths import app_paths
    from app.services.workstation import Workstation
    from app.ui.app import install_asyncgen_hooks
    from app.ui.main_window import MainWindow
    from app.ui.style.theme import apply_style_sheet, apply_theme

    app = QApplication([sys.argv[0]])
    paths = app_paths().ensure()
    workstation = Workstation.create(paths, install_logging("INFO", None))
    workstation.settings.model_folders = [os.environ["LLMW_PROBE_MODELS"]]
    apply_theme(app, "light", with_style_sheet=False)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    install_asyncgen_hooks(loop)
    window = MainWindow(workstation)
    apply_style_sheet(app)
    window.resize(1366, 768)
    window.show()

    async def run() -> None:
        await window.chat_panel.start()
        await show_every_page(window)
        results = await switch_many(window, int(os.environ.get("LLMW_PROBE_SWITCHES", "10")), shots)
        result_file.write_text(json.dumps(results))
        await window.shutdown_panels()
        await workstation.close()

    with loop:
        loop.run_until_complete(run())
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
