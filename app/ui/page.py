"""What the main window asks of every page: start when first shown, follow new settings, shut down."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Page(Protocol):
    def start(self) -> object:
        """The page is shown for the first time: begin its background work (returns its task, if any)."""
        ...

    def settings_changed(self) -> None:
        """The user saved new settings (``workstation.settings`` holds them)."""
        ...

    async def shutdown(self) -> None:
        """The window closes: stop what the page runs. Idempotent."""
        ...
