"""Where the app keeps its files (platformdirs; LLMW_HOME overrides everything, for tests)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

APP_NAME = "llm-workstation"


@dataclass(frozen=True)
class AppPaths:
    config_dir: Path
    data_dir: Path
    cache_dir: Path

    @property
    def settings_file(self) -> Path:
        return self.config_dir / "settings.json"

    @property
    def conversations_db(self) -> Path:
        return self.data_dir / "conversations.sqlite3"

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def modelfiles_dir(self) -> Path:
        """The user's own Modelfiles (the shipped presets live in the repository's modelfiles/)."""
        return self.data_dir / "modelfiles"

    @property
    def log_file(self) -> Path:
        return self.cache_dir / "llm-workstation.log"

    def ensure(self) -> AppPaths:
        for folder in (self.config_dir, self.data_dir, self.cache_dir):
            folder.mkdir(parents=True, exist_ok=True)
        return self


def app_paths() -> AppPaths:
    home = os.environ.get("LLMW_HOME")
    if home:
        root = Path(home)
        return AppPaths(root / "config", root / "data", root / "cache")
    import platformdirs

    return AppPaths(
        Path(platformdirs.user_config_dir(APP_NAME)),
        Path(platformdirs.user_data_dir(APP_NAME)),
        Path(platformdirs.user_cache_dir(APP_NAME)),
    )
