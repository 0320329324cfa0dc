"""A live view of the app's log buffer, with level and text filters."""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QFontDatabase, QGuiApplication, QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.services.logbuffer import LogBuffer, LogEntry

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
DEFAULT_MAX_BLOCKS = 5000
FLUSH_INTERVAL_MS = 50


class _EntryRelay(QObject):
    """Carries entries from logging threads to the GUI thread; emitting is safe from any thread."""

    entry_logged = Signal(object)


class LogViewer(QWidget):
    """Shows a :class:`LogBuffer` live. Records logged on any thread arrive through a queued signal."""

    def __init__(self, buffer: LogBuffer, parent: QWidget | None = None, max_blocks: int = DEFAULT_MAX_BLOCKS) -> None:
        super().__init__(parent)
        self._buffer = buffer
        self._last_seq = 0
        self._pending: list[LogEntry] = []
        self._build_ui(max_blocks)
        self._flush_timer = QTimer(self, singleShot=True, interval=FLUSH_INTERVAL_MS)
        self._flush_timer.timeout.connect(self._flush_pending)
        self._subscribe()
        self._rebuild()

    def _build_ui(self, max_blocks: int) -> None:
        self.level_combo = QComboBox()
        for name in LEVELS:
            self.level_combo.addItem(name, logging.getLevelName(name))
        self.level_combo.setToolTip("Show records at this level and above.")
        self.filter_edit = QLineEdit(placeholderText="Filter text…", clearButtonEnabled=True)
        self.copy_button = QPushButton("Copy all")
        self.clear_button = QPushButton("Clear")
        self.text_view = QPlainTextEdit(readOnly=True)
        self.text_view.setMaximumBlockCount(max_blocks)
        self.text_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))

        bar = QHBoxLayout()
        bar.addWidget(QLabel("Level:"))
        bar.addWidget(self.level_combo)
        bar.addWidget(self.filter_edit, 1)
        bar.addWidget(self.copy_button)
        bar.addWidget(self.clear_button)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.text_view, 1)

        self.level_combo.currentIndexChanged.connect(self._rebuild)
        self.filter_edit.textChanged.connect(self._rebuild)
        self.copy_button.clicked.connect(self.copy_all)
        self.clear_button.clicked.connect(self.clear)
        self._following = True
        scroll = self.text_view.verticalScrollBar()
        scroll.valueChanged.connect(self._on_scrolled)
        scroll.rangeChanged.connect(self._follow_if_at_bottom)

    def _subscribe(self) -> None:
        # The relay has no Qt parent and the callback holds it, so emitting never hits a deleted object;
        # the connection to this widget is dropped by Qt when the widget goes away.
        relay = _EntryRelay()
        relay.entry_logged.connect(self._on_entry, Qt.ConnectionType.QueuedConnection)
        buffer = self._buffer

        def forward(entry: LogEntry) -> None:
            relay.entry_logged.emit(entry)

        self._forward = forward
        self._subscribed = True
        buffer.subscribe(forward)
        self.destroyed.connect(lambda *_: buffer.unsubscribe(forward))

    def unsubscribe(self) -> None:
        """Stop receiving records (also done on close and destruction; showing again resumes)."""
        self._buffer.unsubscribe(self._forward)
        self._subscribed = False

    def closeEvent(self, event: QCloseEvent) -> None:
        self.unsubscribe()
        super().closeEvent(event)

    def showEvent(self, event: QShowEvent) -> None:
        if not self._subscribed:  # Shown again after a close: catch up from the buffer.
            self._buffer.subscribe(self._forward)
            self._subscribed = True
            self._rebuild()
        super().showEvent(event)

    # --- filters -------------------------------------------------------------------------------

    def min_level(self) -> int:
        """The lowest level shown."""
        return int(self.level_combo.currentData())

    def set_level_filter(self, name: str) -> None:
        """Show records at ``name`` ("DEBUG", "INFO", "WARNING", "ERROR") and above."""
        self.level_combo.setCurrentIndex(LEVELS.index(name.upper()))

    def set_text_filter(self, text: str) -> None:
        """Show only records whose line contains ``text`` (case-insensitive)."""
        self.filter_edit.setText(text)

    def _accepts(self, entry: LogEntry, line: str) -> bool:
        needle = self.filter_edit.text().strip().casefold()
        return entry.levelno >= self.min_level() and (not needle or needle in line.casefold())

    # --- content -------------------------------------------------------------------------------

    def visible_text(self) -> str:
        """Everything the view shows now."""
        return self.text_view.toPlainText()

    def copy_all(self) -> None:
        """Put the shown lines on the clipboard."""
        QGuiApplication.clipboard().setText(self.visible_text())

    def clear(self) -> None:
        """Empty the buffer and the view."""
        self._buffer.clear()
        self._pending.clear()
        self.text_view.clear()

    def _rebuild(self) -> None:
        entries = self._buffer.records()
        self._pending.clear()
        self.text_view.clear()
        self._append(entries)
        if entries:
            self._last_seq = max(self._last_seq, entries[-1].seq)

    def _on_entry(self, entry: LogEntry) -> None:
        # Entries already shown by a rebuild (queued before it ran) are skipped by sequence number.
        if entry.seq <= self._last_seq:
            return
        self._last_seq = entry.seq
        self._pending.append(entry)
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def _flush_pending(self) -> None:
        entries, self._pending = self._pending, []
        self._append(entries)

    def _append(self, entries: list[LogEntry]) -> None:
        formatted = ((entry, entry.format()) for entry in entries)
        lines = [line for entry, line in formatted if self._accepts(entry, line)]
        if not lines:
            return
        self.text_view.appendPlainText("\n".join(lines))
        self._follow_if_at_bottom()

    def _on_scrolled(self, value: int) -> None:
        # Within two lines of the end counts as "at the bottom": the layout can grow after an append.
        self._following = value >= self.text_view.verticalScrollBar().maximum() - 2

    def _follow_if_at_bottom(self, *_range: int) -> None:
        if self._following:
            bar = self.text_view.verticalScrollBar()
            bar.setValue(bar.maximum())
