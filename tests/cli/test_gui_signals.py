"""SIGTERM at any moment of the window's start-up or shutdown ends the real app (``python -m app``) with exit 0,
nothing reported as an error and the history intact. The app says where it is (``LLMW_PHASES``): in "step" mode
it waits for a line on stdin after each phase, so the signal lands at exactly that moment; in "print" mode it runs
on, so a second signal lands while the shutdown is really under way."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from app.ui.lifecycle import PHASES_ENV

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name != "posix", reason="POSIX signals")

PHASE_LINE = "llmw-phase "
DEADLINE_S = 120  # generous: the whole run on a loaded 2-core machine; nothing is asserted about its speed


def _seed_history() -> tuple[int, list[str]]:
    """A chat with two messages in the app's history, written before the app starts."""
    from app.core.chat.conversation import Message, Role
    from app.services.chat.history import ConversationStore
    from app.services.paths import app_paths

    store = ConversationStore(app_paths().ensure().conversations_db)
    try:
        chat = store.create("Kept chat", system_prompt="Be brief.")
        texts = ["What is 2 + 2?", "4."]
        store.append_message(chat.id, Message(Role.USER, texts[0]))
        store.append_message(chat.id, Message(Role.ASSISTANT, texts[1]))
    finally:
        store.close()
    return chat.id, texts


def _history_after(chat_id: int) -> tuple[str, list[str], str]:
    from app.services.chat.history import ConversationStore
    from app.services.paths import app_paths

    path = app_paths().conversations_db
    store = ConversationStore(path)
    try:
        chat = store.load(chat_id)
    finally:
        store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    return chat.title, [m.content for m in chat.messages], integrity


def _lines(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _run_app(signal_at: list[str], mode: str) -> tuple[int, list[str], str]:
    """Start the window; send SIGTERM when each phase in ``signal_at`` is reached. Returns the exit status, the
    phases seen (a * after those signalled) and stderr's other lines."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", **{PHASES_ENV: mode})
    app = subprocess.Popen(
        [sys.executable, "-m", "app"], env=env, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_lines, args=(app.stderr, lines), daemon=True).start()
    deadline, seen, other = time.monotonic() + DEADLINE_S, [], []
    try:
        while (line := lines.get(timeout=max(0.1, deadline - time.monotonic()))) is not None:
            if not line.startswith(PHASE_LINE):
                other.append(line)
                continue
            name = line[len(PHASE_LINE) :].strip()
            seen.append(name)
            if name in signal_at:
                app.send_signal(signal.SIGTERM)
                seen[-1] += "*"
            if mode == "step":  # after the signal: it is handled before the app goes on
                app.stdin.write("\n")
                app.stdin.flush()
        return app.wait(timeout=max(1.0, deadline - time.monotonic())), seen, "".join(other)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()


def _errors_in_log() -> list[str]:
    from app.services.paths import app_paths

    log = app_paths().log_file
    text = log.read_text(encoding="utf-8") if log.exists() else ""
    return [line for line in text.splitlines() if " ERROR " in line or " CRITICAL " in line]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signal_at", "mode", "history"),
    [
        (["started"], "step", "one chat"),  # the first line of the window's start-up, before Qt is imported
        (["building"], "step", "empty"),  # Qt and the history's owner are up; the window is about to be built
        (["built"], "step", "one chat"),  # built, not yet shown, the event loop not yet running
        (["starting"], "step", "empty"),  # the loop runs and the history is being opened (the race that exited 1)
        (["starting"], "step", "one chat"),
        (["ready", "closing", "closed"], "step", "one chat"),  # started; again as it closes; again after the loop
        (["starting", "closing"], "print", "empty"),  # free-running: during the start-up, during the real shutdown
    ],
    ids=lambda value: "-".join(value) if isinstance(value, list) else value.replace(" ", "-"),
)
def test_sigterm_at_any_moment_exits_0_with_the_history_intact(signal_at, mode, history):
    kept = _seed_history() if history == "one chat" else None  # (its id, its messages' texts)
    code, seen, stderr = _run_app(signal_at, mode)
    assert code == 0, f"phases {seen}\n{stderr[-3000:]}"
    assert all(f"{name}*" in seen for name in signal_at), seen  # each signal went at its moment
    if signal_at != ["started"]:
        assert seen[-1].startswith("closed"), seen  # the loop ran to the quit, not into a half-done start-up
    assert "Traceback" not in stderr, stderr[-3000:]
    assert _errors_in_log() == []  # e.g. a page's read of the history cut short by the shutdown
    if kept is not None:
        chat_id, texts = kept
        assert _history_after(chat_id) == ("Kept chat", texts, "ok")


def test_a_signal_held_for_the_window_reaches_a_process_that_is_not_the_window():
    """The entry point holds SIGTERM before it knows what it runs; a verb (or the worker) gets it back, and one that
    came meanwhile takes effect then, as it would have without the hold."""
    code = (
        "import os, signal\n"
        "from app.ui.lifecycle import QUIT\n"
        "QUIT.catch()\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "print('held', flush=True)\n"
        "QUIT.release()\n"
        "print('still running')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM and done.stdout == "held\n", done.stderr
