"""``llm-workstation bench history``: the window against a large chat history, and against an empty one.

Qt-free half: builds a synthetic history through the store (one transaction of batch inserts), runs the window
half (:mod:`app.ui.devtools.history_bench`) in a child process per history — the empty one first — so each RSS
figure is its own process's, and compares the two against the issue's targets.

The default history is the issue's: 5,000 chats, 100,000 messages in all, the newest chat holding 3,000 of
them, ~12 words a message (~1.2 M words), a fenced code block in every tenth reply.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.core import safe_json
from app.core.chat.conversation import Conversation, Message, ReplyStats, Role, title_from

DEFAULT_CHATS = 5_000
DEFAULT_MESSAGES = 100_000
DEFAULT_GIANT = 3_000
CODE_EVERY = 10  # every tenth reply carries a code block
LENGTH_EVERY = 50  # every fiftieth reply stopped at the token limit
SPAN_DAYS = 400  # chats spread over this many days, newest now
STALL_TARGET_MS = 50.0
SHOW_TARGET_MS = 150.0
RSS_TARGET_MB = 30.0
CHILD_TIMEOUT_S = 900

# fmt: off
_WORDS = (
    "the", "model", "reads", "each", "token", "and", "the", "cache", "keeps", "what", "it", "saw", "so", "a",
    "longer", "context", "costs", "memory", "while", "a", "smaller", "quantization", "trades", "accuracy", "for",
    "speed", "on", "this", "machine", "with", "layers", "offloaded", "to", "the", "GPU", "when", "it", "fits",
    "and", "the", "rest", "on", "the", "CPU", "threads", "that", "decode", "one", "step", "at", "a", "time",
)
# fmt: on


@dataclass(frozen=True)
class HistoryFacts:
    """What was built: sizes, the giant chat's id and how long building took."""

    chats: int
    messages: int
    words: int
    code_blocks: int
    giant_id: int | None
    other_ids: list[int]  # a few chats to switch between, newest first
    build_s: float


def check_sizes(chats: int, messages: int, giant: int) -> str | None:
    """Why these sizes cannot make a history (None when they can)."""
    if chats < 1 or giant < 1:
        return "--chats and --giant must be at least 1."
    if chats > 1_000_000 or messages > 10_000_000:
        return "At most 1,000,000 chats and 10,000,000 messages."
    if messages < giant + (chats - 1):
        return (
            f"--messages ({messages:,}) must cover the giant chat ({giant:,}) and at least one message for each "
            f"of the other {chats - 1:,} chats."
        )
    return None


class _Text:
    """Deterministic chat text: short user turns, replies of a sentence or two, a code block every tenth reply.

    Sentences come from a pool made once, so a 100,000-message history is written in about a second.
    """

    POOL = 4096

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.replies = 0
        self.words = 0
        self.code_blocks = 0
        self._short = [self._sentence(4, 12) for _ in range(self.POOL)]
        self._long = [self._sentence(6, 18) for _ in range(self.POOL)]
        self._stats = {
            reason: ReplyStats(40, 24, ttft_ms=120.0, decode_tokens_per_s=31.5, finish_reason=reason)
            for reason in ("stop", "length")
        }

    def _sentence(self, low: int, high: int) -> str:
        return " ".join(self.rnd.choices(_WORDS, k=self.rnd.randint(low, high))).capitalize() + "."

    def _pick(self, pool: list[str]) -> str:
        text = pool[self.rnd.randrange(self.POOL)]
        self.words += text.count(" ") + 1
        return text

    def user(self) -> str:
        return self._pick(self._short)

    def reply(self) -> Message:
        self.replies += 1
        n = self.replies
        parts = [self._pick(self._long)]
        if n % 3 == 0:
            parts.append(self._pick(self._short))
        if n % CODE_EVERY == 0:
            self.code_blocks += 1
            self.words += 9
            parts.append(f"```python\ndef step_{n}(x):\n    y = x * {n}\n    return y + 1\n```")
        stats = self._stats["length" if n % LENGTH_EVERY == 0 else "stop"]
        return Message(Role.ASSISTANT, "\n\n".join(parts), model="bench-model", backend="llama.cpp", stats=stats)

    def conversation(self, size: int, updated_at: float) -> Conversation:
        messages = [Message(Role.USER, self.user()) if i % 2 == 0 else self.reply() for i in range(size)]
        return Conversation(title_from(messages[0].content), messages=messages, updated_at=updated_at)


def build_history(db: Path, chats: int, messages: int, giant: int, seed: int = 7) -> HistoryFacts:
    """Write the synthetic history into a new store at ``db``: the giant chat is the newest."""
    from app.services.chat.history import ConversationStore

    started = time.perf_counter()
    text = _Text(seed)
    now = time.time()
    others = chats - 1
    share, extra = divmod(messages - giant, others) if others else (0, 0)
    span = SPAN_DAYS * 86_400

    def conversations() -> Any:
        for i in range(others, 0, -1):  # oldest first, so ids grow with recency like a real history
            age = span * (i / others) ** 2  # denser in recent days, as people chat: every date group gets some
            yield text.conversation(share + (1 if i <= extra else 0), now - age)
        yield text.conversation(giant, now)

    with ConversationStore(db) as store:
        ids = store.import_conversations(conversations())
    return HistoryFacts(
        chats=chats,
        messages=messages,
        words=text.words,
        code_blocks=text.code_blocks,
        giant_id=ids[-1],
        other_ids=ids[-2:-12:-1],
        build_s=time.perf_counter() - started,
    )


def history_db(home: Path) -> Path:
    """Where the app keeps the history under ``LLMW_HOME=home``."""
    from app.services.paths import AppPaths

    return AppPaths(home / "config", home / "data", home / "cache").conversations_db


def _run_window(home: Path, facts: HistoryFacts | None) -> dict[str, Any]:
    """The window half in a child process (offscreen); returns its report."""
    report = home / "report.json"
    plan = home / "plan.json"
    plan.write_text(json.dumps({"giant_id": facts.giant_id, "other_ids": facts.other_ids} if facts else {}))
    env = dict(os.environ, LLMW_HOME=str(home), QT_QPA_PLATFORM="offscreen")
    argv = [sys.executable, "-m", "app.ui.devtools.history_bench", str(plan), str(report)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the window half failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return safe_json.load_file(report, what="the history bench report")


def bench_history(chats: int, messages: int, giant: int) -> dict[str, Any]:
    """Build the history, run the window on an empty and on the full history, compare with the targets."""
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="llmw-history-bench-") as tmp:
        empty_home, full_home = Path(tmp) / "empty", Path(tmp) / "full"
        empty_home.mkdir()
        full_home.mkdir()
        facts = build_history(history_db(full_home), chats, messages, giant)
        empty = _run_window(empty_home, None)
        full = _run_window(full_home, facts)
    report = summarize(facts, empty, full)
    report["machine"] = {"cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()[0]}
    return report


def summarize(facts: HistoryFacts, empty: dict[str, Any], full: dict[str, Any]) -> dict[str, Any]:
    rss_delta = full["rss_after_mb"] - empty["rss_after_mb"]
    targets = {
        "longest_stall_ms": full["longest_stall_ms"] <= STALL_TARGET_MS,
        "giant_shown_ms": full["giant_shown_ms"] <= SHOW_TARGET_MS,
        "rss_over_empty_mb": rss_delta <= RSS_TARGET_MB,
    }
    return {
        "history": asdict(facts),
        "empty": empty,
        "full": full,
        "rss_over_empty_mb": rss_delta,
        "targets": {"longest_stall_ms": STALL_TARGET_MS, "giant_shown_ms": SHOW_TARGET_MS, "rss_over_empty_mb": 30.0},
        "targets_met": targets,
        "all_met": all(targets.values()),
    }


def report_lines(r: dict[str, Any]) -> list[str]:
    h, empty, full = r["history"], r["empty"], r["full"]
    ok = {True: "ok", False: "MISSED"}
    met = r["targets_met"]
    lines = [
        f"history: {h['chats']:,} chats, {h['messages']:,} messages ({h['words']:,} words, {h['code_blocks']:,} code "
        f"blocks), built in {h['build_s']:.2f} s",
        f"{'':32}{'empty':>12}{'full':>12}",
    ]
    rows = [
        ("chat list first page (ms)", "list_first_page_ms"),
        ("giant chat shown (ms)", "giant_shown_ms"),
        ("scroll top to bottom (s)", "scroll_s"),
        ("  steps", "scroll_steps"),
        ("  widgets alive at most", "max_message_widgets"),
        ("chat switch, slowest (ms)", "switch_max_ms"),
        ("chat list scrolled to end (s)", "list_all_s"),
        ("longest Qt-thread stall (ms)", "longest_stall_ms"),
        ("RSS before (MB)", "rss_before_mb"),
        ("RSS after (MB)", "rss_after_mb"),
    ]
    for label, key in rows:
        lines.append(f"{label:32}{_cell(empty.get(key)):>12}{_cell(full.get(key)):>12}")
    lines += [
        f"longest stall {full['longest_stall_ms']:.1f} ms (target <= {STALL_TARGET_MS:g}): "
        f"{ok[met['longest_stall_ms']]}",
        f"giant chat shown in {full['giant_shown_ms']:.1f} ms (target <= {SHOW_TARGET_MS:g}): "
        f"{ok[met['giant_shown_ms']]}",
        f"RSS over the empty history {r['rss_over_empty_mb']:+.1f} MB (target <= {RSS_TARGET_MB:g}): "
        f"{ok[met['rss_over_empty_mb']]}",
    ]
    if machine := r.get("machine"):
        lines.append(
            f"machine: {machine['cpus']} CPUs, load average {machine['load_before']:.1f} → {machine['load_after']:.1f} "
            "(stalls and times grow when other work competes for the CPUs)"
        )
    if full.get("worst_stall_where"):
        lines.append(f"longest stall in: {full['worst_stall_where']}")
    return lines


def _cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)
