"""The base of every top-level page: a view of the workstation's services. A page is built when first needed,
starts its background work on its first show (``start``), refreshes on a later one (``shown_again``), follows
the settings (``settings_changed``) and the services it subscribes to (``follow``), and stops on ``shutdown``.

A page owns no long-lived state: what must outlive it (downloads, the monitor, the API server, jobs) belongs to
the workstation, so a page never opened costs nothing and loses nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QWidget

from app.ui.tasks import loop_running

if TYPE_CHECKING:
    from app.services.settings_changes import SettingsChanged
    from app.services.workstation import Workstation


class Page(QWidget):
    def __init__(self, workstation: Workstation, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.workstation = workstation
        self._first_shown = False
        self._subscriptions: list[Callable[[], None]] = []
        subscriptions = self._subscriptions  # the list, not the page: the C++ object may be gone when it fires
        self.destroyed.connect(lambda: _unsubscribe_all(subscriptions))
        self.follow(workstation.subscribe(self._settings_event))

    # --- what a page overrides -----------------------------------------------------------------------------
    def start(self) -> object:
        """The page is shown for the first time: begin its background work (returns its task, if any).
        Idempotent: the window's start-up and tests may call it before the page is shown."""
        return None

    def shown_again(self) -> None:
        """A later show: read again what may have changed meanwhile (a server started, free memory)."""

    def settings_changed(self, event: SettingsChanged) -> None:
        """Settings fields changed (``event.names``; ``workstation.settings`` holds the values)."""

    async def shutdown(self) -> None:
        """The window closes: stop what the page runs. Idempotent. Overrides call ``super().shutdown()``."""
        self.unfollow()

    # --- the lifecycle ------------------------------------------------------------------------------------
    def follow(self, unsubscribe: Callable[[], None]) -> None:
        """Keep a service subscription for the page's life: it ends on ``shutdown`` or when the page goes."""
        self._subscriptions.append(unsubscribe)

    def unfollow(self) -> None:
        _unsubscribe_all(self._subscriptions)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not loop_running():  # Qt events outside the loop (a test setting up): nothing can start yet
            return
        if self._first_shown:
            self.shown_again()
            return
        self._first_shown = True
        self.start()

    def _settings_event(self, event: SettingsChanged) -> None:
        self.settings_changed(event)


def _unsubscribe_all(subscriptions: list[Callable[[], None]]) -> None:
    while subscriptions:
        subscriptions.pop()()
