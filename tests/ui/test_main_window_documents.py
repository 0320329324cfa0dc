"""From start-up, the window follows the folders watched in an earlier session (it opens the document index off
the Qt thread where there is one), and creates no index where there is none."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from app.services.documents import events as ev
from app.services.documents.service import DocumentsService
from app.services.paths import app_paths
from app.services.workstation import Workstation
from app.ui.main_window import _follow_documents
from tests.support.waiting import until


def _write(path: Path, text: str) -> None:
    part = path.with_name(f".{path.name}.part")
    part.write_text(text)
    os.replace(part, path)


def test_start_up_follows_folders_watched_before_and_makes_no_index_where_there_is_none(tmp_path: Path) -> None:
    paths = app_paths().ensure()
    index = paths.data_dir / "documents.sqlite3"
    folder = tmp_path / "notes"
    folder.mkdir()
    _write(folder / "a.md", "The okapi lives in the rainforest.\n")

    async def first_session() -> None:
        workstation = Workstation.create(paths)
        try:
            await _follow_documents(workstation)
            assert not index.exists()  # nothing indexed yet: nothing opened, nothing made
            await workstation.documents.index([str(folder)], "notes")
            await workstation.documents.watch(str(folder), True)
        finally:
            await workstation.close()

    async def next_session() -> None:
        workstation = Workstation.create(paths)
        service: DocumentsService = workstation.documents
        service.watch_interval_s = 0.05
        indexed: list[str] = []
        service.subscribe(lambda e: indexed.append(Path(e.path).name) if isinstance(e, ev.FileEvent)
                          and e.kind == ev.INDEXED else None)  # fmt: skip
        try:
            await _follow_documents(workstation)  # as the window does after its first frame
            _write(folder / "a.md", "The capybara swims in rivers.\n")
            await until(lambda: "a.md" in indexed, timeout=60)
            assert [Path(hit.path).name for hit in await service.search("capybara")] == ["a.md"]
        finally:
            await workstation.close()

    asyncio.run(first_session())
    asyncio.run(next_session())
