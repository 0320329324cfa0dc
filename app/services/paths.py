"""Where the app keeps its files (platformdirs; LLMW_HOME overrides everything, for tests), and keeping them
private: the app's folders owner-only (0700), its data files owner-only (0600)."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

APP_NAME = "llm-workstation"
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AppPaths:
    config_dir: Path
    data_dir: Path
    cache_dir: Path

    @property
    def settings_file(self) -> Path:
        return self.config_dir / "settings.json"

    @property
    def mcp_servers_file(self) -> Path:
        """The MCP servers the app starts (app/core/mcp/config.py); owner-only: their ``env`` can hold tokens."""
        return self.config_dir / "mcp-servers.json"

    @property
    def conversations_db(self) -> Path:
        return self.data_dir / "conversations.sqlite3"

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def modelfiles_dir(self) -> Path:
        """The user's own Modelfiles (the shipped presets are package data: app/services/presets.py)."""
        return self.data_dir / "modelfiles"

    @property
    def log_file(self) -> Path:
        return self.cache_dir / "llm-workstation.log"

    @property
    def llama_kernel_fallback(self) -> Path:
        """Present when llama.cpp's CPU-specific kernels crashed here: models load without them."""
        return self.cache_dir / "llama-kernel-fallback"

    @property
    def downloads_queue(self) -> Path:
        return self.data_dir / "downloads.json"

    @property
    def bench_dir(self) -> Path:
        return self.data_dir / "bench"

    @property
    def attachments_dir(self) -> Path:
        """Images sent in chats, content-addressed (``ab/ab12….png``): the same image is kept once."""
        return self.data_dir / "attachments"

    @property
    def library_cache(self) -> Path:
        return self.cache_dir / "library-index.json"

    def ensure(self) -> AppPaths:
        """Create the three folders, owner-only (folders above them, such as ``~/.config``, are left alone)."""
        for folder in (self.config_dir, self.data_dir, self.cache_dir):
            folder.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
            try:
                owner_only(folder)
            except OSError as exc:  # not ours to change (another user's folder): use it as it is
                log.info("could not make %s owner-only: %s", folder, exc.strerror or exc)
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


# --- private files ------------------------------------------------------------------------------------------------
def owner_only(path: Path) -> bool:
    """Take away the group's and others' permissions on a regular file or a folder (the owner's are kept as they
    are); True when it changed anything.

    A link is left alone (its target may be anywhere), and so is a missing path or anything else. Permission
    and other ``OSError``s pass through."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    current = stat.S_IMODE(info.st_mode)
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)) or not current & 0o077:
        return False
    os.chmod(path, current & 0o700)
    return True


def private_database(path: Path) -> None:
    """Make an SQLite database file owner-only before SQLite opens it: created empty (SQLite reads that as a
    new database) if missing, tightened if an earlier version left it, its journals too. SQLite gives the
    ``-wal`` and ``-shm`` files it creates the mode of the database file, so they come out owner-only as well.
    A file that is not ours to change is left as it is; other ``OSError``s pass through."""
    try:
        for journal in ("-wal", "-shm", "-journal"):
            owner_only(Path(f"{path}{journal}"))
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE))
    except FileExistsError:
        with contextlib.suppress(PermissionError):
            owner_only(path)
    except PermissionError as exc:
        log.info("could not make %s owner-only: %s", path, exc.strerror or exc)


def open_private(path: Path, encoding: str = "utf-8") -> TextIO:
    """``path`` opened to write text from scratch, owner-only, even if a file of that name was there before."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, PRIVATE_FILE)
        return os.fdopen(fd, "w", encoding=encoding)
    except BaseException:
        os.close(fd)
        raise


def secure_app_files(paths: AppPaths | None = None) -> list[Path]:
    """Make what earlier versions left readable by others owner-only: the app's folders (0700) and its data
    files (0600) — settings, the history database and its journals, the logs, the downloads queue and the
    copies set aside from it, the library cache and the saved bench runs. Returns what it changed. Only the
    group's and others' permissions are taken away.

    Called once at start (CLI and window). Never touches model folders (the app's ``models`` included), the
    Hugging Face cache, the vLLM environment or the user's Modelfiles; creates nothing; a file it may not
    change is logged and skipped."""
    if os.name != "posix":
        return []
    paths = paths or app_paths()
    changed: list[Path] = []
    for path in _private_paths(paths):
        try:
            if owner_only(path):
                changed.append(path)
        except OSError as exc:
            log.info("could not make %s owner-only: %s", path, exc.strerror or exc)
    if changed:
        log.info("made owner-only: %s", ", ".join(str(p) for p in changed))
    return changed


def _private_paths(paths: AppPaths) -> list[Path]:
    return [
        paths.config_dir,
        paths.data_dir,
        paths.cache_dir,
        paths.bench_dir,
        paths.settings_file,
        paths.settings_file.with_suffix(".tmp"),
        paths.mcp_servers_file,
        paths.data_dir / "responses",  # the API server's stored responses
        *(Path(f"{paths.conversations_db}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")),
        *_existing(paths.cache_dir, f"{paths.log_file.name}*"),
        *_existing(paths.data_dir, f"{paths.downloads_queue.stem}.*"),
        *_existing(paths.cache_dir, f"{paths.library_cache.name}*"),
        *_existing(paths.bench_dir, "*.json"),
        *_existing(paths.bench_dir, "*.tmp"),
    ]


def _existing(folder: Path, pattern: str) -> list[Path]:
    try:
        return list(folder.glob(pattern))
    except OSError:
        return []
