"""``llm-workstation chats``: the chat history from the command line — list, search, show, export, import, fork —
and ``bench search`` (full-text search over a large synthetic history).

Exit codes: 0 done; 1 the history cannot be opened or written; 2 bad input (an unknown chat id, a message index
outside the chat, a file that is not a chat export).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.cli.common import EXIT_BAD_INPUT, EXIT_OK, fail, fail_error
from app.core.errors import AppError

VERBS = ("chats",)
BENCH_KINDS = ("search",)


def add_parser(verbs: argparse._SubParsersAction) -> None:
    chats = verbs.add_parser("chats", help="list, search, show, export, import and fork chats in the history")
    actions = chats.add_subparsers(dest="chats_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every chat, newest first: id, title, messages")
    listing.add_argument("--json", action="store_true", help="print a JSON list of {id, title, messages}")
    search = actions.add_parser("search", help="full-text search over every chat (operators are plain words)")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=50)
    search.add_argument("--json", action="store_true", help="print a JSON list of {id, title, message, snippet}")
    show = actions.add_parser("show", help="print a chat as Markdown")
    show.add_argument("id", type=int)
    export = actions.add_parser("export", help="write a chat as Markdown, JSON or self-contained HTML")
    export.add_argument("id", type=int)
    export.add_argument("--format", choices=("md", "json", "html"), default="md")
    export.add_argument("-o", "--output", default=None, help="the file to write (default: standard output)")
    imported = actions.add_parser("import", help="import our JSON export or ChatGPT's conversations.json")
    imported.add_argument("file")
    imported.add_argument("--format", choices=("auto", "json", "chatgpt"), default="auto")
    fork = actions.add_parser("fork", help="a new chat from a chat's message N and those before it")
    fork.add_argument("id", type=int)
    fork.add_argument("--at", type=int, required=True, metavar="MESSAGE_INDEX", help="counted from 1")
    fork.add_argument("--last", type=int, default=None, metavar="N", help="keep only the last N turns")


def run(args: argparse.Namespace) -> int:
    from app.services.chat.history import ConversationStore
    from app.services.paths import app_paths

    paths = app_paths()
    try:
        with ConversationStore(paths.conversations_db) as store:
            return _ACTIONS[args.chats_action](store, args, paths)
    except AppError as exc:
        return fail_error(exc, {"output": "-o FILE"})
    except OSError as exc:
        return fail(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), EXIT_BAD_INPUT)


def _list(store: Any, args: argparse.Namespace, _paths: Any) -> int:
    rows = store.chats_with_counts()
    if args.json:
        print(json.dumps([{"id": i, "title": title, "messages": n} for i, title, _at, n in rows], ensure_ascii=False))
        return EXIT_OK
    for chat_id, title, _at, count in rows:
        print(f"{chat_id:>6}  {count:>5} msgs  {title}")
    if not rows:
        print("No chats yet.")
    return EXIT_OK


def _search(store: Any, args: argparse.Namespace, _paths: Any) -> int:
    if not 1 <= args.limit <= 1000:
        return fail("--limit must be 1 to 1000", EXIT_BAD_INPUT)
    hits = store.search(args.query, args.limit)
    if args.json:
        out = [
            {"id": h.conversation_id, "title": h.title, "message": h.message_index + 1, "snippet": h.marked()}
            for h in hits
        ]
        print(json.dumps(out, ensure_ascii=False))
        return EXIT_OK
    for hit in hits:
        print(f"{hit.conversation_id:>6}  #{hit.message_index + 1:<4} {hit.title}\n        {hit.marked()}")
    if not hits:
        print("No matches.")
    return EXIT_OK


def _show(store: Any, args: argparse.Namespace, paths: Any) -> int:
    from app.services.chat.exchange import ExportFormat, export_chat

    sys.stdout.write(export_chat(store, args.id, ExportFormat.MARKDOWN, paths.attachments_dir))
    return EXIT_OK


def _export(store: Any, args: argparse.Namespace, paths: Any) -> int:
    from app.services.chat.exchange import ExportFormat, export_chat, write_export

    fmt = ExportFormat(args.format)
    if args.output is None:
        sys.stdout.write(export_chat(store, args.id, fmt, paths.attachments_dir))
        return EXIT_OK
    target = write_export(store, args.id, fmt, Path(args.output), paths.attachments_dir)
    print(f"Wrote chat {args.id} to {target}", file=sys.stderr)
    return EXIT_OK


def _import(store: Any, args: argparse.Namespace, _paths: Any) -> int:
    from app.services.chat.exchange import ImportFormat, import_file

    def progress(done: int, total: int) -> None:
        if total and sys.stderr.isatty():
            print(f"\rImporting: {done:,} of {total:,} conversations", end="", file=sys.stderr, flush=True)

    summary = import_file(store, Path(args.file), ImportFormat(args.format), progress)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(summary.text())
    return EXIT_OK


def _fork(store: Any, args: argparse.Namespace, _paths: Any) -> int:
    fork = store.fork(args.id, args.at, args.last)
    print(f"Forked chat {args.id} at message {args.at} into chat {fork.id}: {fork.title} "
          f"({len(fork.messages)} messages)")  # fmt: skip
    return EXIT_OK


_ACTIONS = {"list": _list, "search": _search, "show": _show, "export": _export, "import": _import, "fork": _fork}


# --- bench search -----------------------------------------------------------------------------------------------


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:
    from app.devtools.search_bench import DEFAULT_CHATS, DEFAULT_MESSAGES

    bench = kinds.add_parser(
        "search",
        help="full-text search over a large synthetic history: query p50/p95, migration (indexing) time",
        description="Build a synthetic history (default 10,000 chats, 200,000 messages) in a temporary data "
        "folder through the store, as a schema-2 history, then open it (migration 3 indexes every message: timed) "
        "and run a fixed set of searches — rare and common words, several words, prefixes, operators and quotes "
        "typed as plain words — repeatedly. Target: query p95 at most 50 ms.",
    )
    bench.add_argument("--chats", type=int, default=DEFAULT_CHATS, help=f"chats in all (default {DEFAULT_CHATS:,})")
    bench.add_argument("--messages", type=int, default=DEFAULT_MESSAGES,
                       help=f"messages in all (default {DEFAULT_MESSAGES:,})")  # fmt: skip
    bench.add_argument("--rounds", type=int, default=5, help="times each query runs (default 5)")
    bench.add_argument("--json", action="store_true", help="print the figures as JSON")


def run_bench(args: argparse.Namespace) -> int:
    from app.devtools.search_bench import bench_search, check_sizes, report_lines

    problem = check_sizes(args.chats, args.messages, args.rounds)
    if problem:
        return fail(problem, EXIT_BAD_INPUT)
    report = bench_search(args.chats, args.messages, args.rounds)
    print(json.dumps(report, indent=2) if args.json else "\n".join(report_lines(report)))
    return EXIT_OK
