"""Watched folders, with the real documents service (parse worker, SQLite store): a file changed, added or deleted
in a watched folder is followed by the index while the service runs; an unchanged file is never read again; the
flag lives per root and goes with its folder."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from app.services.documents import events as ev
from app.services.documents import watch
from app.services.documents.service import DocumentsService
from tests.support.waiting import until


class Events:
    def __init__(self) -> None:
        self.seen: list[ev.FileEvent] = []

    def __call__(self, event: object) -> None:
        if isinstance(event, ev.FileEvent):
            self.seen.append(event)

    def mark(self) -> int:
        return len(self.seen)

    def since(self, mark: int, kind: str) -> list[str]:
        return [Path(e.path).name for e in self.seen[mark:] if e.kind == kind]


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Animals\n\nThe okapi lives in the rainforest.\n")
    (folder / "b.txt").write_text("The lynx hunts at night.\n")
    return folder


def _write(path: Path, text: str) -> None:
    """Whole at once (a poll never sees it half written)."""
    part = path.with_name(f".{path.name}.part")
    part.write_text(text)
    os.replace(part, path)


def _names(hits: list) -> list[str]:
    return [Path(hit.path).name for hit in hits]


def test_a_watched_folder_follows_changed_new_and_deleted_files(tmp_path: Path) -> None:
    folder = _folder(tmp_path)

    async def scenario() -> None:
        service = DocumentsService(tmp_path / "documents.sqlite3")
        service.watch_interval_s = 0.05
        events = Events()
        service.subscribe(events)
        try:
            await service.index([str(folder)], "notes")
            assert await service.watch(str(folder), True) == [watch.WatchedRoot("notes", str(folder))]
            assert await service.watched() == [watch.WatchedRoot("notes", str(folder))]

            mark = events.mark()
            _write(folder / "a.md", "# Animals\n\nThe capybara swims in rivers and lakes.\n")
            await until(lambda: "a.md" in events.since(mark, ev.INDEXED), timeout=60)
            assert _names(await service.search("capybara")) == ["a.md"]
            assert await service.search("okapi") == []
            assert events.since(mark, ev.STARTED) == ["a.md"]  # b.txt, unchanged, was not read again

            mark = events.mark()
            (folder / "deeper").mkdir()
            _write(folder / "deeper" / "c.md", "The axolotl regrows its limbs.\n")
            await until(lambda: "c.md" in events.since(mark, ev.INDEXED), timeout=60)
            assert _names(await service.search("axolotl")) == ["c.md"]

            mark = events.mark()
            (folder / "b.txt").unlink()
            await until(lambda: "b.txt" in events.since(mark, ev.REMOVED), timeout=60)
            assert await service.search("lynx") == []
            assert sorted(Path(r.path).name for r in await service.files("notes")) == ["a.md", "c.md"]
            assert events.since(mark, ev.STARTED) == []
        finally:
            await service.close()

    asyncio.run(scenario())


def test_an_unwatched_folder_is_left_alone_and_the_poller_stops(tmp_path: Path) -> None:
    folder = _folder(tmp_path)

    async def scenario() -> None:
        service = DocumentsService(tmp_path / "documents.sqlite3")
        service.watch_interval_s = 0.05
        try:
            await service.index([str(folder)], "notes")
            await service.watch(str(folder), True)
            watcher = service._watcher
            assert watcher is not None and watcher.running
            assert await service.watch(str(folder), False) == [watch.WatchedRoot("notes", str(folder))]
            await until(lambda: not watcher.running, timeout=30)  # nothing watched: the poller ends
            (folder / "b.txt").write_text("The lynx now hunts by day, a longer text.\n")
            assert await watcher.poll() == []  # nothing watched, nothing indexed
            assert _names(await service.search("night")) == ["b.txt"]
        finally:
            await service.close()

    asyncio.run(scenario())


def test_the_stat_pass_reads_no_file_and_sees_every_kind_of_change(tmp_path: Path) -> None:
    folder = _folder(tmp_path)

    async def scenario() -> None:
        service = DocumentsService(tmp_path / "documents.sqlite3")
        service.watch_interval_s = None  # no poller: the stat pass alone
        try:
            await service.index([str(folder)], "notes")
            assert await service.watch(str(folder), True) == [watch.WatchedRoot("notes", str(folder))]
            assert service._watcher is None  # watch_interval_s None: never polls
            store = await service.open()
            root = watch.WatchedRoot("notes", str(folder))
            assert not watch.has_changed(store, root)
            unreadable = folder / "b.txt"
            unreadable.chmod(0)  # a stat pass needs no read permission: still unchanged
            try:
                assert not watch.has_changed(store, root)
            finally:
                unreadable.chmod(0o644)
            info = os.stat(folder / "a.md")
            os.utime(folder / "a.md", ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
            assert watch.has_changed(store, root)
        finally:
            await service.close()

    asyncio.run(scenario())


def test_the_watch_flag_goes_with_its_folder_and_needs_an_added_folder(tmp_path: Path) -> None:
    folder = _folder(tmp_path)

    async def scenario() -> None:
        service = DocumentsService(tmp_path / "documents.sqlite3")
        service.watch_interval_s = None
        try:
            assert await service.watch(str(folder), True) == []  # never added
            await service.index([str(folder)], "notes")
            await service.index([str(folder)], "zoo")
            assert len(await service.watch(str(folder), True)) == 2  # every collection it is in
            assert await service.watch(str(folder), False, "zoo") == [watch.WatchedRoot("zoo", str(folder))]
            assert await service.watched() == [watch.WatchedRoot("notes", str(folder))]
            store = await service.open()
            await asyncio.to_thread(store.remove_path, str(folder), "notes")
            assert await service.watched() == []  # the folder removed: its watch too
            await service.index([str(folder)], "zoo")
            assert await service.watch(str(folder), True, "zoo") == [watch.WatchedRoot("zoo", str(folder))]
            await service.remove_collection("zoo")
            assert await service.watched() == []  # the collection removed: its watches too
        finally:
            await service.close()

    asyncio.run(scenario())


def test_folders_watched_in_an_earlier_session_are_followed_once_the_service_opens(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    database = tmp_path / "documents.sqlite3"

    async def earlier() -> None:
        service = DocumentsService(database)
        service.watch_interval_s = None
        try:
            await service.index([str(folder)], "notes")
            await service.watch(str(folder), True)
        finally:
            await service.close()

    async def later() -> None:
        _write(folder / "b.txt", "The lynx was seen near the glacier while the app was closed.\n")
        service = DocumentsService(database)
        service.watch_interval_s = 0.05
        events = Events()
        service.subscribe(events)
        try:
            await service.summaries()  # anything that opens the store
            await until(lambda: "b.txt" in events.since(0, ev.INDEXED), timeout=60)
            assert _names(await service.search("glacier")) == ["b.txt"]
        finally:
            await service.close()
        assert service._watcher is not None and not service._watcher.running  # closing stopped it

    asyncio.run(earlier())
    asyncio.run(later())
