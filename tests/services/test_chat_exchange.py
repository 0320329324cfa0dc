"""Export and import through the store and real files: round trips, a ChatGPT export, bad files, and an import
killed midway (a real subprocess, SIGKILL) that loses nothing already stored."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from app.core.chat.chat_json import ChatFileError
from app.core.chat.conversation import Attachment, Conversation, Message, Role
from app.services.chat.exchange import (
    ExportFormat,
    ImportFormat,
    import_file,
    import_file_async,
    write_export,
)
from app.services.chat.history import AsyncConversationStore, ConversationStore, NotFoundError
from tests.support.chatgpt_export import export, linear_conversation

ROOT = Path(__file__).resolve().parents[2]
IMPORTER = ROOT / "tests" / "support" / "chat_importer.py"
PNG = b"\x89PNG\r\n\x1a\n-tiny"


@pytest.fixture
def store(tmp_path: Path):
    with ConversationStore(tmp_path / "conversations.sqlite3") as opened:
        yield opened


def _sample(store: ConversationStore) -> int:
    picture = Attachment("image", "ab/ab12.png", "image/png", name="plot.png")
    messages = [
        Message(Role.USER, "Plot this", attachments=[picture]),
        Message(Role.ASSISTANT, "```python\nplot(x)\n```", model="tiny", backend="llama.cpp", reasoning="Hmm."),
    ]
    [chat_id] = store.import_conversations([Conversation("Plots", "Be brief.", messages, updated_at=50.0)])
    return chat_id


def test_json_export_imports_back_as_an_equal_chat(store: ConversationStore, tmp_path: Path) -> None:
    chat_id = _sample(store)
    target = write_export(store, chat_id, ExportFormat.JSON, tmp_path / "plots.json")
    summary = import_file(store, target)
    assert summary.format is ImportFormat.JSON and len(summary.chat_ids) == 1 and summary.messages == 2
    original, copy = store.load(chat_id), store.load(summary.chat_ids[0])
    assert copy.id != original.id
    assert [(m.role, m.content, m.reasoning, m.attachments, m.model) for m in copy.messages] == [
        (m.role, m.content, m.reasoning, m.attachments, m.model) for m in original.messages
    ]
    assert (copy.title, copy.system_prompt, copy.updated_at) == ("Plots", "Be brief.", 50.0)
    assert summary.text() == "Imported 1 chat (2 messages)."


def test_html_export_embeds_the_image_from_the_attachments_folder(store: ConversationStore, tmp_path: Path) -> None:
    chat_id = _sample(store)
    attachments = tmp_path / "attachments"
    (attachments / "ab").mkdir(parents=True)
    (attachments / "ab" / "ab12.png").write_bytes(PNG)
    page = write_export(store, chat_id, ExportFormat.HTML, tmp_path / "p.html", attachments).read_text("utf-8")
    assert 'src="data:image/png;base64,' in page and "<details><summary>Thinking</summary>" in page
    assert '<span class="hl-n">plot</span>' in page
    markdown = write_export(store, chat_id, ExportFormat.MARKDOWN, tmp_path / "p.md", attachments).read_text()
    assert f"![plot.png]({(attachments / 'ab' / 'ab12.png').resolve().as_uri()})" in markdown


def test_an_attachment_path_cannot_leave_the_attachments_folder(store: ConversationStore, tmp_path: Path) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(PNG)
    sneaky = Attachment("image", "../secret.png", "image/png", name="x.png")
    [chat_id] = store.import_conversations(
        [Conversation("X", messages=[Message(Role.USER, "hi", attachments=[sneaky])])]
    )
    (tmp_path / "attachments").mkdir()
    page = write_export(store, chat_id, ExportFormat.HTML, tmp_path / "x.html", tmp_path / "attachments").read_text()
    assert "data:image/png" not in page and "not found" in page


def test_export_of_an_unknown_chat_writes_nothing(store: ConversationStore, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        write_export(store, 404, ExportFormat.MARKDOWN, tmp_path / "none.md")
    assert list(tmp_path.glob("none.md*")) == []


def test_a_chatgpt_export_imports_each_current_branch(store: ConversationStore, tmp_path: Path) -> None:
    source = tmp_path / "conversations.json"
    source.write_text(json.dumps(export(3)), encoding="utf-8")
    seen: list[tuple[int, int]] = []
    summary = import_file(store, source, progress=lambda done, total: seen.append((done, total)))
    assert summary.format is ImportFormat.CHATGPT and len(summary.chat_ids) == 3
    assert summary.abandoned_branches == 2 and seen[0] == (0, 3) and seen[-1] == (3, 3)
    assert "2 abandoned branches" in summary.text()
    titles = {store.load(i).title for i in summary.chat_ids}
    assert titles == {"Arithmetic", "Chat 1", "Chat 2"}
    assert {h.title for h in store.search("zebras")} == {"Chat 1", "Chat 2"}  # imported chats are searchable


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "is not valid JSON"),
        (b'{"hello": 1}', "neither an LLM Workstation chat export nor a ChatGPT conversations.json"),
        (b"[1, 2]", "neither an LLM Workstation chat export"),
    ],
)
def test_a_bad_file_says_what_to_do_and_stores_nothing(
    store: ConversationStore, tmp_path: Path, content: bytes, message: str
) -> None:
    source = tmp_path / "bad.json"
    source.write_bytes(content)
    with pytest.raises(ChatFileError, match=message):
        import_file(store, source)
    with pytest.raises(ChatFileError, match="does not exist"):
        import_file(store, tmp_path / "missing.json")
    assert store.count_conversations() == 0


def test_the_async_import_runs_off_the_loop_and_reports_progress(tmp_path: Path) -> None:
    source = tmp_path / "conversations.json"
    source.write_text(json.dumps([linear_conversation(i) for i in range(120)]), encoding="utf-8")

    async def scenario() -> tuple[int, list[tuple[int, int]], int]:
        seen: list[tuple[int, int]] = []
        store = await AsyncConversationStore.open(tmp_path / "conversations.sqlite3")
        async with store:
            summary = await import_file_async(store, source, progress=lambda d, t: seen.append((d, t)))
            await asyncio.sleep(0)  # progress calls scheduled on the loop have run
            return len(summary.chat_ids), seen, await store.count_conversations()

    stored, seen, count = asyncio.run(scenario())
    assert stored == count == 120 and seen[0] == (0, 120) and (50, 120) in seen and seen[-1] == (120, 120)


def test_an_import_killed_midway_keeps_every_batch_already_stored(tmp_path: Path) -> None:
    db = tmp_path / "history" / "conversations.sqlite3"
    with ConversationStore(db) as store:
        before = _sample(store)
    source = tmp_path / "conversations.json"
    source.write_text(json.dumps([linear_conversation(i, turns=3) for i in range(400)]), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, str(IMPORTER), str(db), str(source)], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(4)]  # 0, 10, 20, 30 stored
        assert lines[-1] == "stored 30"
        assert proc.poll() is None, "the import finished before it could be killed"
    finally:
        proc.kill()  # SIGKILL on POSIX: no clean-up
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    if sys.platform != "win32":
        assert proc.returncode == -9
    with ConversationStore(db) as store:
        rows = store.chats_with_counts()
        assert store.load(before).title == "Plots" and len(store.load(before).messages) == 2
        imported = [row for row in rows if row[0] != before]
        assert 30 <= len(imported) < 400 and len(imported) % 10 == 0  # whole batches only
        assert all(count == 6 for _id, _title, _at, count in imported)  # no chat half stored
        assert len(store.search("zebras", 1000)) == 3 * len(imported)  # and indexed with them
    with closing(sqlite3.connect(db)) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
