"""Import a module on first use, so start-up does not pay for clients the user may never touch."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class _LazyModule(ModuleType):
    """Stands in for a module; the first attribute read imports it (thread-safe: the import system locks)."""

    def __getattr__(self, attribute: str) -> Any:
        value = getattr(importlib.import_module(self.__name__), attribute)
        setattr(self, attribute, value)  # later reads skip this method
        return value


def lazy_import(name: str) -> ModuleType:
    """A stand-in for module ``name`` whose code runs when one of its attributes is first read."""
    return _LazyModule(name)


def import_now(*names: str) -> None:
    """Import the real modules (call it off the Qt thread, so a stand-in's first use there costs nothing)."""
    for name in names:
        importlib.import_module(name)
