"""``llm-workstation chats …`` in real subprocesses against a history in an isolated data folder (LLMW_HOME)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.chat.conversation import Conversation, Message, Role
from app.services.chat.history import ConversationStore
from app.services.paths import app_paths
from tests.support.chatgpt_export import export


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LLMW_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "home"
    monkeypatch.setenv("LLMW_HOME", str(root))
    with ConversationStore(app_paths().conversations_db) as store:
        store.import_conversations(
            [
                Conversation("Soup", messages=[Message(Role.USER, "Tomato soup?"), Message(Role.ASSISTANT, "Yes.")]),
                Conversation(
                    "Code",
                    messages=[
                        Message(Role.USER, "Sort a list"),
                        Message(Role.ASSISTANT, "```python\nsorted(x)\n```", model="tiny"),
                        Message(Role.USER, "In reverse?"),
                        Message(Role.ASSISTANT, "sorted(x, reverse=True)"),
                    ],
                ),
            ]
        )
    return root


def test_list_and_search_as_json(home: Path) -> None:
    listed = cli(home, "chats", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {"id": 2, "title": "Code", "messages": 4},
        {"id": 1, "title": "Soup", "messages": 2},
    ]
    found = cli(home, "chats", "search", "tomato", "--json")
    assert found.returncode == 0, found.stderr
    [hit] = json.loads(found.stdout)
    assert hit["id"] == 1 and hit["snippet"] == "**Tomato** soup?" and hit["message"] == 1
    for typed in ('"unbalanced', "NOT soup", "soup OR", "NEAR(", "*"):
        result = cli(home, "chats", "search", typed, "--json")
        assert result.returncode == 0 and isinstance(json.loads(result.stdout), list), (typed, result.stderr)


def test_show_and_export_to_stdout_and_to_a_file(home: Path, tmp_path: Path) -> None:
    shown = cli(home, "chats", "show", "2")
    assert shown.returncode == 0 and shown.stdout.startswith("# Code\n") and "### 4. Assistant" in shown.stdout
    as_json = cli(home, "chats", "export", "2", "--format", "json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["chats"][0]["title"] == "Code"
    target = tmp_path / "code.html"
    written = cli(home, "chats", "export", "2", "--format", "html", "-o", str(target))
    assert written.returncode == 0 and written.stdout == "" and str(target) in written.stderr
    assert '<span class="hl-nb">sorted</span>' in target.read_text("utf-8")


def test_import_fork_and_what_they_print(home: Path, tmp_path: Path) -> None:
    source = tmp_path / "conversations.json"
    source.write_text(json.dumps(export(2)), encoding="utf-8")
    imported = cli(home, "chats", "import", str(source))
    assert imported.returncode == 0, imported.stderr
    assert "Imported 2 chats" in imported.stdout and "2 abandoned branches" in imported.stdout
    forked = cli(home, "chats", "fork", "2", "--at", "3")
    assert forked.returncode == 0 and "into chat 5: Code (fork) (3 messages)" in forked.stdout
    last = cli(home, "chats", "fork", "2", "--at", "4", "--last", "1")
    assert last.returncode == 0 and "(2 messages)" in last.stdout
    with ConversationStore(app_paths().conversations_db) as store:
        fork = store.load(5)
    assert (fork.forked_from, fork.forked_at) == (2, 3)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("chats", "show", "99"), "No conversation with id 99"),
        (("chats", "export", "99", "--format", "md"), "No conversation with id 99"),
        (("chats", "fork", "2", "--at", "9"), "Message 9 is not in the chat 'Code' (messages: 1 to 4)"),
        (("chats", "import", "/nonexistent/file.json"), "does not exist"),
    ],
)
def test_unknown_ids_and_bad_input_exit_2(home: Path, args: tuple[str, ...], message: str) -> None:
    result = cli(home, *args)
    assert result.returncode == 2 and message in result.stderr and result.stderr.startswith("llm-workstation: ")


def test_a_bad_file_exits_2_and_stores_nothing(home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"some": "thing"}', encoding="utf-8")
    result = cli(home, "chats", "import", str(bad), "--format", "auto")
    assert result.returncode == 2 and "neither an LLM Workstation chat export nor a ChatGPT" in result.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("[{", encoding="utf-8")
    result = cli(home, "chats", "import", str(broken), "--format", "chatgpt")
    assert result.returncode == 2 and "is not valid JSON" in result.stderr
    wrong = tmp_path / "wrong.json"
    wrong.write_text("[]", encoding="utf-8")
    assert cli(home, "chats", "import", str(wrong), "--format", "json").returncode == 2
    assert len(json.loads(cli(home, "chats", "list", "--json").stdout)) == 2


def test_bench_search_runs_small(home: Path) -> None:
    result = cli(home, "bench", "search", "--chats", "30", "--messages", "300", "--rounds", "2", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["chats"], report["messages"], report["rounds"]) == (30, 300, 2)
    assert report["p95_ms"] >= report["p50_ms"] > 0 and report["migration_s"] > 0
    assert report["hits"]["model"] > 0 and report["hits"]["nothinglikethis"] == 0
    assert report["met"] == (report["p95_ms"] <= 50.0)
    refused = cli(home, "bench", "search", "--chats", "10", "--messages", "5")
    assert refused.returncode == 2 and "--messages at least --chats" in refused.stderr
