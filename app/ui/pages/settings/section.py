"""What every Settings section is: a titled body of fields that shows a Settings and gives back its own fields."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.settings import Settings
from app.ui.pages.settings.fields import SectionBody


class Section:
    """One entry of the section list. ``values`` returns the Settings fields this section owns, by name."""

    name = ""
    icon = "settings"

    def __init__(self, edited: Callable[[], None]) -> None:
        self.edited = edited
        self.body = self.build()
        self.body.finish()

    def build(self) -> SectionBody:
        raise NotImplementedError

    def show(self, settings: Settings) -> None:
        raise NotImplementedError

    def values(self, shown: Settings) -> dict[str, Any]:
        raise NotImplementedError

    def problems(self, shown: Settings) -> list[str]:
        """Why these values cannot be saved; empty when they can."""
        return []
