"""The Monitor's card for the parallel llama.cpp engine (``serve --parallel N``): one row per slot — its state, the
context cells it holds as a bar, whose request runs there — and the requests waiting for a slot beyond N; while the
engine is off, how to turn it on.

A view of the engine host's ``ParallelSnapshot``: ``display`` only sets widget contents.
"""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QProgressBar, QVBoxLayout, QWidget

from app.services.engines.entries import display_name
from app.services.engines.events import ParallelSnapshot, SlotView
from app.ui.pages.monitor.views import bar, caption, shrinkable
from app.ui.style.theme import SPACE_M, SPACE_S, set_role

TITLE = "llama.cpp parallel slots"
OFF_TEXT = (
    "No llama.cpp model runs requests side by side now. The API server does it as soon as it serves a llama.cpp "
    "model (as many at once as fit, unless Parallel sequences says otherwise), and chats do it on a model whose "
    "Parallel sequences is 2 or more (the Chat drawer or the Library). Its slots, their clients and the queue "
    "show here."
)
STATE_NAMES = {"idle": "idle", "prefilling": "prefill", "decoding": "generating"}
STATE_ROLES = {"idle": "muted", "prefilling": "tight", "decoding": "fits"}
HEADERS = ("Slot", "State", "Context cells", "Client · request")


def state_name(state: str) -> str:
    """``decoding`` → ``generating``: the words the rest of the app uses."""
    return STATE_NAMES.get(state, state)


def slot_owner(slot: SlotView) -> str:
    """``127.0.0.1:50412 · request 7 · 37 tokens``; ``—`` for a free slot."""
    tokens = f"{slot.generated:,} token{'s' if slot.generated != 1 else ''}" if slot.generated else None
    parts = [slot.client, f"request {slot.request}" if slot.request else None, tokens]
    return " · ".join(p for p in parts if p) or "—"


def waiting_line(waiting: int) -> str:
    if waiting == 0:
        return "No request waiting for a slot."
    return f"{waiting:,} waiting for a free slot."


def summary_line(snapshot: ParallelSnapshot) -> str:
    """``tiny-8k.gguf · 2 of 4 slots busy · 1,024 / 16,384 cells · pid 4242``."""
    busy = sum(1 for s in snapshot.slots if s.state != "idle")
    parts = [
        display_name(snapshot.entry or ""),
        f"{busy} of {len(snapshot.slots)} slots busy",
        f"{snapshot.cells_used:,} / {snapshot.cells_total:,} cells",
    ]
    if snapshot.pid is not None:
        parts.append(f"pid {snapshot.pid}")
    return " · ".join(parts)


def restyle(label: QLabel, role: str) -> None:
    """A new style role, re-polished only when it changes (the card redraws about twice a second)."""
    if label.property("role") != role:
        set_role(label, role)


class SlotRow:
    """One slot's widgets in the card's grid."""

    def __init__(self, grid: QGridLayout, row: int) -> None:
        self.number = QLabel()
        self.state = QLabel()
        self.cells: QProgressBar = bar()
        self.owner = shrinkable(caption())
        for column, widget in enumerate((self.number, self.state, self.cells, self.owner)):
            grid.addWidget(widget, row, column)
            widget.show()  # now, not on the layout's next turn: it shows with the table (at once if shown)

    def show_slot(self, slot: SlotView) -> None:
        self.number.setText(f"#{slot.slot}")
        self.state.setText(state_name(slot.state))
        restyle(self.state, STATE_ROLES.get(slot.state, "muted"))
        self.cells.setValue(round(100 * slot.cells / slot.n_ctx) if slot.n_ctx else 0)
        self.cells.setFormat(f"{slot.cells:,} / {slot.n_ctx:,}")
        self.owner.setText(slot_owner(slot))
        self.owner.setToolTip(slot_owner(slot))

    def remove(self) -> None:
        for widget in (self.number, self.state, self.cells, self.owner):
            widget.deleteLater()


class ParallelSlotsView(QFrame):
    """The parallel engine's slots and queue, or (while it is off) how to turn it on."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        set_role(self, "card")
        self.setObjectName("monitor_parallel_slots")
        self.title_label = QLabel(TITLE)
        bold = self.title_label.font()
        bold.setBold(True)
        self.title_label.setFont(bold)
        self.summary = shrinkable(caption())
        self.off_text = shrinkable(caption(OFF_TEXT))
        self.waiting = shrinkable(QLabel())
        self.waiting.setObjectName("monitor_parallel_waiting")
        self.table = QWidget()
        self.grid = QGridLayout(self.table)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(SPACE_M)
        self.grid.setVerticalSpacing(2)
        self.grid.setColumnStretch(2, 3)
        self.grid.setColumnStretch(3, 2)
        for column, text in enumerate(HEADERS):
            self.grid.addWidget(caption(text), 0, column)
        self.rows: list[SlotRow] = []
        box = QVBoxLayout(self)
        box.setContentsMargins(SPACE_M, SPACE_S, SPACE_M, SPACE_M)
        box.setSpacing(SPACE_S)
        for widget in (self.title_label, self.summary, self.off_text, self.table, self.waiting):
            box.addWidget(widget)
        self.display(ParallelSnapshot())

    @property
    def running(self) -> bool:
        return not self.off_text.isVisibleTo(self)

    def display(self, snapshot: ParallelSnapshot) -> None:
        running = snapshot.entry is not None
        self.title_label.setText(TITLE if running else f"{TITLE}: off")
        self.off_text.setVisible(not running)
        for widget in (self.summary, self.table, self.waiting):
            widget.setVisible(running)
        if not running:
            return
        self.summary.setText(summary_line(snapshot))
        self._show_rows(snapshot.slots)
        self.waiting.setText(waiting_line(snapshot.waiting))
        restyle(self.waiting, "tight" if snapshot.waiting else "muted")

    def _show_rows(self, slots: tuple[SlotView, ...]) -> None:
        while len(self.rows) < len(slots):
            self.rows.append(SlotRow(self.grid, len(self.rows) + 1))
        while len(self.rows) > len(slots):
            self.rows.pop().remove()
        for row, slot in zip(self.rows, slots, strict=True):
            row.show_slot(slot)
