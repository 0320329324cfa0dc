"""Files shipped inside the package (icons), found through importlib.resources."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def app_icon_path() -> Path:
    return Path(str(files("app").joinpath("resources", "icons", "llm-workstation.svg")))
