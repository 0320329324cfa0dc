"""``llm-workstation bench search``: full-text search over a large synthetic history.

Builds 10,000 chats / 200,000 messages (by default) through the store in a temporary data folder, turns the
file back into a schema-2 history (no search index), times opening it — migration 3 indexes every message — and
then runs a fixed set of searches ``rounds`` times each: p50 and p95 of a query's time against the target.

The text is made of a Zipf-like vocabulary (a few words are everywhere, most are rare), so the queries span
words found in most chats, in a few, and in none.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
import statistics
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from app.core.chat.conversation import Conversation, Message, Role, title_from

DEFAULT_CHATS = 10_000
DEFAULT_MESSAGES = 200_000
P95_TARGET_MS = 50.0
VOCABULARY = 20_000
BUILD_BATCH = 500

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po", "da", "fe", "gu", "hi", "ja", "qu")
_COMMON = ("the", "model", "token", "cache", "context", "memory", "layer", "speed", "python", "error")
QUERIES = (
    "model",  # in most messages
    "context memory",  # two common words
    "python error",
    "kalo",  # a mid-frequency made-up word
    "mineru sato",
    "zequpo",  # rare
    "vijaqu hifeda",
    "cach",  # a prefix, as typed
    "tok",
    "nothinglikethis",  # no match
    'model" OR "cache',  # operators and an unbalanced quote: plain words
    "NOT model",
    "context*",
    "NEAR(model token)",
    "(python",
    "layer speed token cache",
)


def check_sizes(chats: int, messages: int, rounds: int) -> str | None:
    if chats < 1 or messages < chats:
        return "--chats must be at least 1 and --messages at least --chats."
    if chats > 1_000_000 or messages > 10_000_000:
        return "At most 1,000,000 chats and 10,000,000 messages."
    if not 1 <= rounds <= 100:
        return "--rounds must be 1 to 100."
    return None


class _Text:
    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)
        words = [*_COMMON, *(self._word(i) for i in range(VOCABULARY))]
        cumulative = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(words))))
        self._sentences = [
            " ".join(self.rnd.choices(words, cum_weights=cumulative, k=self.rnd.randint(5, 16))).capitalize() + "."
            for _ in range(8192)
        ]

    @staticmethod
    def _word(i: int) -> str:
        n, out = i, []
        for _ in range(3):
            n, r = divmod(n, len(_SYLLABLES))
            out.append(_SYLLABLES[r])
        return "".join(out)

    def message(self, role: Role) -> Message:
        count = self.rnd.randint(1, 2) if role is Role.USER else self.rnd.randint(2, 6)
        return Message(role, " ".join(self.rnd.choices(self._sentences, k=count)))


def build(db: Path, chats: int, messages: int, seed: int = 11) -> float:
    """Write the history through the store; returns the seconds it took."""
    from app.services.chat.history import ConversationStore

    started = time.perf_counter()
    text = _Text(seed)
    share, extra = divmod(messages, chats)
    now = time.time()
    with ConversationStore(db) as store:
        batch: list[Conversation] = []
        for i in range(chats):
            size = share + (1 if i < extra else 0)
            msgs = [text.message(Role.USER if j % 2 == 0 else Role.ASSISTANT) for j in range(size)]
            batch.append(Conversation(title_from(msgs[0].content), messages=msgs, updated_at=now - (chats - i)))
            if len(batch) >= BUILD_BATCH:
                store.import_conversations(batch)
                batch = []
        if batch:
            store.import_conversations(batch)
    return time.perf_counter() - started


def as_schema_2(db: Path) -> None:
    """Take the search index (schema 3) out again, and what later schemas added (tool columns, 4; versions, 5;
    delete with undo, 6), as a history written by the version before the search."""
    with closing(sqlite3.connect(db, isolation_level=None)) as raw:
        raw.execute("ALTER TABLE conversations DROP COLUMN deleted_at")
        raw.execute("ALTER TABLE messages DROP COLUMN versions_json")
        raw.execute("ALTER TABLE messages DROP COLUMN tool_calls_json")
        raw.execute("ALTER TABLE conversations DROP COLUMN tools_json")
        for trigger in ("messages_fts_insert", "messages_fts_delete", "messages_fts_update"):
            raw.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        raw.execute("DROP TABLE IF EXISTS messages_fts")
        raw.execute("DROP INDEX IF EXISTS conversations_by_folder")
        raw.execute("DROP INDEX IF EXISTS conversations_by_pin")
        raw.execute("PRAGMA user_version = 2")
        raw.execute("VACUUM")


def bench_search(chats: int = DEFAULT_CHATS, messages: int = DEFAULT_MESSAGES, rounds: int = 5) -> dict[str, Any]:
    from app.services.chat.history import ConversationStore

    with tempfile.TemporaryDirectory(prefix="llmw-search-bench-") as folder:
        db = Path(folder) / "data" / "conversations.sqlite3"
        build_s = build(db, chats, messages)
        as_schema_2(db)
        started = time.perf_counter()
        store = ConversationStore(db)
        migration_s = time.perf_counter() - started
        with store:
            per_query: dict[str, list[float]] = {query: [] for query in QUERIES}
            hits: dict[str, int] = {}
            for _ in range(rounds):
                for query in QUERIES:
                    t0 = time.perf_counter()
                    found = store.search(query, 50)
                    per_query[query].append((time.perf_counter() - t0) * 1e3)
                    hits[query] = len(found)
    times = sorted(t for samples in per_query.values() for t in samples)
    p95 = _percentile(times, 95)
    return {
        "chats": chats,
        "messages": messages,
        "build_s": round(build_s, 2),
        "migration_s": round(migration_s, 3),
        "queries": len(QUERIES),
        "rounds": rounds,
        "p50_ms": round(_percentile(times, 50), 2),
        "p95_ms": round(p95, 2),
        "max_ms": round(times[-1], 2),
        "per_query_median_ms": {q: round(statistics.median(s), 2) for q, s in per_query.items()},
        "hits": hits,
        "target_p95_ms": P95_TARGET_MS,
        "met": p95 <= P95_TARGET_MS,
    }


def _percentile(values: list[float], pct: float) -> float:
    index = max(0, min(len(values) - 1, round(pct / 100 * len(values) + 0.5) - 1))
    return values[index]


def report_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"History: {report['chats']:,} chats, {report['messages']:,} messages (built in {report['build_s']:.1f} s)",
        f"Migration to schema 3 (indexing every message): {report['migration_s']:.2f} s",
        f"{report['queries']} queries × {report['rounds']} rounds: p50 {report['p50_ms']:.1f} ms, "
        f"p95 {report['p95_ms']:.1f} ms, max {report['max_ms']:.1f} ms "
        f"(target p95 ≤ {report['target_p95_ms']:.0f} ms: {'met' if report['met'] else 'NOT met'})",
        "Slowest queries (median):",
    ]
    slowest = sorted(report["per_query_median_ms"].items(), key=lambda kv: -kv[1])[:5]
    lines += [f"  {ms:7.2f} ms  {query!r} ({report['hits'][query]} hits)" for query, ms in slowest]
    return lines
