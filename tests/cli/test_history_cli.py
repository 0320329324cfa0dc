"""``llm-workstation bench history``: a small history end to end in real subprocesses, and the history builder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.core.chat.conversation import Role
from app.core.chat.date_groups import date_group
from app.devtools.history_bench import CODE_EVERY, build_history, report_lines
from app.services.chat.history import ConversationStore


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout, check=False, env=env
    )


def test_bench_history_runs_the_window_on_an_empty_and_a_full_history() -> None:
    result = cli("bench", "history", "--chats", "50", "--messages", "500", "--giant", "200", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    history, empty, full = report["history"], report["empty"], report["full"]
    assert (history["chats"], history["messages"]) == (50, 500) and history["words"] > 2000
    assert full["giant_messages"] == 200 and full["list_chats"] == 50
    assert full["scroll_steps"] >= 1 and len(full["switch_ms"]) == 11  # ten others, then back to the giant
    assert 0 < full["giant_shown_ms"] < 5000 and full["max_message_widgets"] <= 24
    assert "giant_shown_ms" not in empty and empty["rss_after_mb"] > 0
    assert report["rss_over_empty_mb"] == full["rss_after_mb"] - empty["rss_after_mb"]
    assert report["targets"] == {"longest_stall_ms": 50.0, "giant_shown_ms": 150.0, "rss_over_empty_mb": 30.0}
    assert report["all_met"] == all(report["targets_met"].values())
    assert set(full["phase_stalls_ms"]) >= {"giant chat opened", "giant chat scrolled", "chat switches"}
    text = "\n".join(report_lines(report))
    assert "giant chat shown in" in text and "RSS over the empty history" in text


def test_bench_history_refuses_sizes_that_cannot_make_a_history() -> None:
    few = cli("bench", "history", "--chats", "10", "--messages", "100", "--giant", "95")
    assert few.returncode == 2 and "must cover the giant chat (95) and at least one message" in few.stderr
    none = cli("bench", "history", "--giant", "0")
    assert none.returncode == 2 and "--chats and --giant must be at least 1" in none.stderr


def test_the_built_history_has_the_asked_shape(tmp_path: Path) -> None:
    db = tmp_path / "conversations.sqlite3"
    facts = build_history(db, chats=12, messages=140, giant=40)
    with ConversationStore(db) as store:
        page = store.conversations_page(100)
        assert page.total == 12 and page.chats[0].id == facts.giant_id  # the giant chat is the newest
        assert sum(store.count_messages(chat.id) for chat in page.chats) == 140
        giant = store.load(facts.giant_id).messages
    assert len(giant) == 40 and [m.role for m in giant[:2]] == [Role.USER, Role.ASSISTANT]
    replies = [m for m in giant if m.role is Role.ASSISTANT]
    with_code = ["```python" in m.content for m in replies].count(True)
    assert len(replies) // CODE_EVERY <= with_code <= len(replies) // CODE_EVERY + 1
    now = page.chats[0].updated_at
    assert {date_group(chat.updated_at, now) for chat in page.chats} >= {"Today", "Previous 7 days", "Older"}
    assert facts.other_ids == [chat.id for chat in page.chats[1:11]]
