"""Private data stays private: the app's folders are 0700 and its data files 0600 after a fresh start, and what an
earlier version left readable by others is tightened at start, by the window and by the CLI, without touching
model folders, the Hugging Face cache or anything a link points to."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.services.paths import app_paths, owner_only, secure_app_files

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def start_window(home: Path, **env: str) -> None:
    """``llm-workstation --smoke``: the window's real start-up in its own process, under a lenient umask."""
    subprocess.run(
        [sys.executable, "-m", "app", "--smoke"],
        env={**os.environ, "LLMW_HOME": str(home), "QT_QPA_PLATFORM": "offscreen", **env},
        preexec_fn=lambda: os.umask(0o022),
        capture_output=True,
        timeout=120,
        check=True,
    )


@pytest.fixture
def lenient_umask():
    """Files a test makes come out 0644 and folders 0755, as on most desktops, whatever the runner's umask."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_a_fresh_start_makes_private_folders_and_files(isolated_home, lenient_umask):
    from app.core.chat.conversation import Message, Role
    from app.core.settings import Settings, save_settings
    from app.services.bench.store import BenchStore
    from app.services.chat.history import ConversationStore
    from app.services.downloads.jobs import JobStore
    from app.services.library.cache import HeaderCache
    from app.services.logbuffer import install_logging, uninstall_logging

    start_window(isolated_home)
    paths = app_paths()
    assert {mode(p) for p in (paths.config_dir, paths.data_dir, paths.cache_dir)} == {0o700}
    install_logging("INFO", paths.log_file)
    try:
        logging.getLogger("app.tests.modes").info("a line for the log file")
    finally:
        uninstall_logging()
    save_settings(Settings(), paths.settings_file)
    JobStore(paths.downloads_queue).save([])
    cache = HeaderCache(paths.library_cache)
    cache.begin()
    cache.save()
    BenchStore(paths.bench_dir).save({"target": {"backend": "llama.cpp", "model": "tiny"}})
    with ConversationStore(paths.conversations_db) as store:  # open: the -wal and -shm files exist
        store.append_message(store.create("hi").id, Message(role=Role.USER, content="private words"))
        journals = [Path(f"{paths.conversations_db}{suffix}") for suffix in ("-wal", "-shm")]
        assert all(p.exists() for p in journals)
        assert {mode(p) for p in journals} == {0o600}
    files = [
        paths.log_file,
        paths.settings_file,
        paths.downloads_queue,
        paths.library_cache,
        paths.conversations_db,
        *paths.bench_dir.glob("*.json"),
    ]
    assert all(p.is_file() for p in files) and len(files) == 6
    assert {str(p): mode(p) for p in files} == {str(p): 0o600 for p in files}


def _as_an_earlier_version_left_it(home: Path, outside: Path) -> dict[str, list[Path]]:
    """The app's files at 0644 in 0755 folders, plus things that are not the app's to change."""
    paths = app_paths()
    private_files = [
        paths.settings_file,
        paths.conversations_db,
        Path(f"{paths.conversations_db}-wal"),
        Path(f"{paths.conversations_db}-shm"),
        paths.log_file,
        paths.log_file.with_name(paths.log_file.name + ".1"),
        paths.downloads_queue,
        paths.downloads_queue.with_suffix(".bad"),
        paths.library_cache,
        paths.bench_dir / "20250101-000000-llama.cpp-tiny.json",
    ]
    private_dirs = [paths.config_dir, paths.data_dir, paths.cache_dir, paths.bench_dir]
    hf_cache = outside / "hf" / "hub" / "models--org--name" / "blobs"
    user_models = outside / "my-models"
    kept = [
        paths.models_dir,
        paths.models_dir / "starter.gguf",
        paths.modelfiles_dir,
        paths.modelfiles_dir / "mine.Modelfile",
        paths.data_dir / "vllm-venv" / "bin" / "python",
        hf_cache,
        hf_cache / "abc123",
        user_models,
        user_models / "model.gguf",
        outside / "linked-queue.json",
    ]
    for folder in [*private_dirs, paths.models_dir, paths.modelfiles_dir, hf_cache, user_models]:
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o755)
    (paths.data_dir / "vllm-venv" / "bin").mkdir(parents=True)
    for file in [*private_files, *(p for p in kept if p.suffix or p.name in ("python", "abc123"))]:
        file.write_bytes(b"{}")
        file.chmod(0o755 if file.name == "python" else 0o644)
    queue_link = paths.data_dir / "downloads.linked.json"  # a link the app's glob sees: its target is not ours
    queue_link.symlink_to(outside / "linked-queue.json")
    return {"private_files": private_files, "private_dirs": private_dirs, "kept": kept}


def _assert_tightened(layout: dict[str, list[Path]], before: dict[Path, int]) -> None:
    assert {str(p): mode(p) for p in layout["private_dirs"]} == {str(p): 0o700 for p in layout["private_dirs"]}
    assert {str(p): mode(p) for p in layout["private_files"]} == {str(p): 0o600 for p in layout["private_files"]}
    assert {str(p): mode(p) for p in layout["kept"]} == {str(p): before[p] for p in layout["kept"]}


def test_the_cli_tightens_what_an_earlier_version_left(isolated_home, tmp_path, lenient_umask):
    from app.cli import main

    layout = _as_an_earlier_version_left_it(isolated_home, tmp_path / "outside")
    before = {p: mode(p) for p in layout["kept"]}
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text("FROM x\n")
    assert main(["modelfile", "parse", str(modelfile)]) == 0
    _assert_tightened(layout, before)


def test_the_window_tightens_what_an_earlier_version_left(isolated_home, tmp_path, lenient_umask):
    outside = tmp_path / "outside"
    layout = _as_an_earlier_version_left_it(isolated_home, outside)
    app_paths().conversations_db.unlink()  # the window opens the history: a real database, not "{}"
    for journal in ("-wal", "-shm"):
        Path(f"{app_paths().conversations_db}{journal}").unlink()
    layout["private_files"] = layout["private_files"][:1] + layout["private_files"][4:]
    before = {p: mode(p) for p in layout["kept"]}
    start_window(isolated_home, HF_HOME=str(outside / "hf"))
    _assert_tightened(layout, before)
    assert mode(app_paths().conversations_db) == 0o600


def test_an_existing_database_and_its_journals_are_tightened_when_opened(tmp_path, lenient_umask):
    import sqlite3

    from app.services.chat.history import ConversationStore

    db = tmp_path / "history.sqlite3"
    with ConversationStore(db) as store:
        store.create("old")
    other = sqlite3.connect(db)  # an earlier version's process, still running: its -wal and -shm are there
    try:
        other.execute("PRAGMA journal_mode=WAL")
        other.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('x', 0, 0)")
        other.commit()
        files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
        for path in files:
            path.chmod(0o644)
        with ConversationStore(db) as store:
            store.create("new")
            assert {str(p): mode(p) for p in files} == {str(p): 0o600 for p in files}
    finally:
        other.close()


def test_secure_app_files_changes_only_group_and_other_bits_and_creates_nothing(isolated_home, lenient_umask):
    paths = app_paths()
    assert secure_app_files() == [] and not isolated_home.exists()  # a first start: nothing there yet
    paths.config_dir.mkdir(parents=True)
    paths.settings_file.write_text("{}")
    paths.settings_file.chmod(0o400)  # read-only for its owner: stays so (no bit is ever added)
    paths.config_dir.chmod(0o750)
    assert secure_app_files() == [paths.config_dir]
    assert mode(paths.config_dir) == 0o700 and mode(paths.settings_file) == 0o400
    assert secure_app_files() == []  # nothing left to do


def test_owner_only_leaves_links_devices_and_missing_paths(tmp_path):
    target = tmp_path / "target"
    target.write_text("x")
    target.chmod(0o644)
    link = tmp_path / "link"
    link.symlink_to(target)
    assert not owner_only(link) and mode(target) == 0o644
    assert not owner_only(tmp_path / "missing")
    if os.path.exists("/dev/null"):
        assert not owner_only(Path("/dev/null"))
