"""The shipped Modelfile presets: package data in ``app/resources/modelfiles/``, found through
importlib.resources so a wheel, the PyInstaller bundle and the .deb carry them as a source checkout does."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def shipped_presets_dir() -> Path:
    """The folder of the shipped presets (read-only: the Modelfile page copies a preset before saving it)."""
    return Path(str(files("app").joinpath("resources", "modelfiles")))
