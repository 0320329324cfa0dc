"""The window half of ``bench history``, run in a child process per history: ``python -m
app.ui.devtools.history_bench PLAN.json REPORT.json`` with ``LLMW_HOME`` pointing at the history's data folder.

The window is the chat page's history part — the chat list and the transcript, driven by a real ``ChatSession``
over the app's history store (opened through the Workstation, as the window opens it), at 1366×768 offscreen.
Steps: show the window; load the list's first page; click the giant chat (the newest) and time it until shown
and painted; scroll it top to bottom a page at a time; click through a few other chats and back; scroll the
chat list to its end (every page loaded). The stall watchdog's heartbeat gives the longest Qt-thread stall.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMainWindow, QSplitter

from app.core.chat.conversation import Conversation
from app.services.chat.session import ChatObserver, ChatSession
from app.ui.pages.chat.chat_list import ChatList
from app.ui.pages.chat.message_item import MessageItem
from app.ui.pages.chat.transcript import TranscriptView
from app.ui.tasks import spawn
from app.ui.watchdog import StallWatchdog

WINDOW_SIZE = (1366, 768)
SETTLE_S = 0.4
SWITCHES = 10


class _Painted(QObject):
    """The time of the first paint of the transcript's viewport after ``arm()``."""

    def __init__(self) -> None:
        super().__init__()
        self.first: float | None = None
        self._armed = False

    def arm(self) -> None:
        self.first, self._armed = None, True

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if self._armed and event.type() == QEvent.Type.Paint:
            self.first, self._armed = time.perf_counter(), False
        return False


class _Stalls(logging.Handler):
    """The watchdog's reports: where the Qt thread was during the longest stall."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.worst = (0.0, "")

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) and len(record.args) == 2 else (0.0, "")
        late, stack = float(str(args[0])), str(args[1])  # milliseconds, the Qt thread's stack
        if late > self.worst[0]:
            frames = [line.strip() for line in stack.splitlines() if line.strip().startswith("File")]
            self.worst = (late, " <- ".join(reversed(frames[-4:])))


class BenchWindow(QMainWindow):
    """The chat list beside the transcript, wired as the chat page wires them."""

    def __init__(self, painted: _Painted) -> None:
        super().__init__()
        self.painted = painted
        self.chat_list = ChatList()
        self.view = TranscriptView()
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.chat_list)
        splitter.addWidget(self.view)
        splitter.setSizes([260, WINDOW_SIZE[0] - 260])
        self.setCentralWidget(splitter)
        self.shown_id: int | None = None

    def show_conversation(self, conversation: Conversation) -> None:
        self.view.show_messages(conversation.messages)
        self.chat_list.select(conversation.id)
        self.shown_id = conversation.id
        self.painted.arm()  # the next paint shows it


class _Observer(ChatObserver):
    def __init__(self, window: BenchWindow) -> None:
        self.window = window

    def conversation_changed(self, conversation: Conversation) -> None:
        self.window.show_conversation(conversation)


def _rss_mb() -> float:
    import psutil

    gc.collect()
    return float(psutil.Process().memory_info().rss) / 2**20


async def _settle(seconds: float = SETTLE_S) -> None:
    await asyncio.sleep(seconds)


async def _until(predicate: Any, timeout: float = 60.0) -> None:
    """Poll gently: a busy loop would hold the GIL and slow the store's worker thread (not as the app idles)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the window did not get there in time")
        await asyncio.sleep(0.005)


class _Run:
    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.report: dict[str, Any] = {}
        self.painted = _Painted()
        self.window = BenchWindow(self.painted)
        self.window.view.viewport().installEventFilter(self.painted)
        self.watchdog = StallWatchdog(threshold_s=0.05, parent=self.window)
        self.stalls = _Stalls()
        self.phase_stalls: dict[str, float] = {}

    def _phase(self, name: str) -> None:
        """End a phase: its longest stall goes to the report."""
        self.phase_stalls[name] = self.watchdog.reset_longest() * 1e3

    def _rss(self) -> float:
        """RSS after a full collection; the collection's own pause is not the window's and is not counted."""
        rss = _rss_mb()
        self.watchdog.reset_longest()
        return rss

    async def run(self) -> dict[str, Any]:
        from app.services.logbuffer import install_logging
        from app.services.paths import app_paths
        from app.services.workstation import Workstation

        logging.getLogger("app.ui.watchdog").addHandler(self.stalls)
        workstation = Workstation.create(app_paths().ensure(), install_logging("WARNING", None))
        store = await workstation.open_history()
        assert store is not None, workstation.store_problem
        from app.core.chat import code_highlight  # as the chat page does at start: lexers loaded off the Qt thread

        await asyncio.get_running_loop().run_in_executor(None, code_highlight.prepare)
        window = self.window
        window.resize(*WINDOW_SIZE)
        window.show()
        self.watchdog.start()
        await _settle()
        self._phase("window shown")
        self.report["rss_before_mb"] = self._rss()
        session = ChatSession(store, workstation.host, lambda: workstation.settings.sampling, _Observer(window))
        window.chat_list.chat_chosen.connect(lambda chat_id: spawn(session.open(chat_id), "open chat"))
        window.chat_list.set_source(store)
        started = time.perf_counter()
        await window.chat_list.refresh()
        self.report["list_first_page_ms"] = (time.perf_counter() - started) * 1e3
        await _settle(0.1)
        self._phase("chat list")
        if self.plan.get("giant_id"):
            await self._giant(int(self.plan["giant_id"]))
            await self._switches([int(i) for i in self.plan.get("other_ids", [])][:SWITCHES])
            await self._list_to_end()
        await _settle()
        self._phase("idle")
        self.report["rss_after_mb"] = self._rss()
        self.report["phase_stalls_ms"] = self.phase_stalls
        self.report["longest_stall_ms"] = max(self.phase_stalls.values())
        self.report["worst_stall_where"] = self.stalls.worst[1]
        self.report["max_message_widgets"] = len(window.view.findChildren(MessageItem))
        self.watchdog.stop()
        window.close()
        await workstation.close()
        return self.report

    async def _open(self, chat_id: int) -> float:
        """Click ``chat_id`` in the list; milliseconds until its messages are shown and painted."""
        chat_list = self.window.chat_list
        row = chat_list.model.row_of(chat_id)
        assert row is not None, f"chat {chat_id} is not in the list's first page"
        chat_list.view.scrollTo(chat_list.model.index(row))
        await asyncio.sleep(0.05)
        rect = chat_list.view.visualRect(chat_list.model.index(row))
        self.window.shown_id = None
        started = time.perf_counter()
        QTest.mouseClick(chat_list.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        await _until(lambda: self.window.shown_id == chat_id and self.painted.first is not None)
        assert self.painted.first is not None
        return (self.painted.first - started) * 1e3

    async def _giant(self, giant_id: int) -> None:
        self.report["giant_shown_ms"] = await self._open(giant_id)
        self.report["giant_messages"] = self.window.view.message_count()
        await _settle(0.2)
        self._phase("giant chat opened")
        view = self.window.view
        bar = view.verticalScrollBar()
        view.scroll_to_message(0, highlight=False)
        await asyncio.sleep(0.02)
        steps, started = 0, time.perf_counter()
        while bar.value() < bar.maximum():
            self.painted.arm()
            bar.setValue(bar.value() + bar.pageStep())
            steps += 1
            await _until(lambda: self.painted.first is not None, timeout=10)
        self.report["scroll_s"] = time.perf_counter() - started
        self.report["scroll_steps"] = steps
        self._phase("giant chat scrolled")

    async def _switches(self, others: list[int]) -> None:
        times = [await self._open(chat_id) for chat_id in others]
        times.append(await self._open(int(self.plan["giant_id"])))
        self.report["switch_ms"] = times
        self.report["switch_max_ms"] = max(times)
        await _settle(0.2)
        self._phase("chat switches")

    async def _list_to_end(self) -> None:
        chat_list = self.window.chat_list
        started = time.perf_counter()
        while chat_list.model.has_more():
            loaded = chat_list.model.chat_count()
            chat_list.view.scrollToBottom()
            await _until(lambda n=loaded: chat_list.model.chat_count() > n, timeout=30)
        self.report["list_all_s"] = time.perf_counter() - started
        self.report["list_chats"] = chat_list.model.chat_count()
        await _settle(0.2)
        self._phase("chat list to its end")


def run(plan_path: Path, report_path: Path) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import qasync

    from app.ui.app import install_asyncgen_hooks
    from app.ui.style.theme import apply_theme

    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    app = QApplication.instance() or QApplication([sys.argv[0]])
    assert isinstance(app, QApplication)
    apply_theme(app, "light")
    app.setQuitOnLastWindowClosed(False)  # the run closes its window before it is done
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    install_asyncgen_hooks(loop)
    with loop:
        report = loop.run_until_complete(_Run(plan).run())
    report_path.write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    run(Path(sys.argv[1]), Path(sys.argv[2]))
