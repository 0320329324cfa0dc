"""``llm-workstation bench history``: the window against a large chat history and an empty one, in one run.

Exit codes: 0 done (the figures say whether the targets were met); 1 the window half failed; 2 bad input.
"""

from __future__ import annotations

import argparse
import json

from app.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, fail

VERBS: tuple[str, ...] = ()
BENCH_KINDS = ("history",)


def add_parser(verbs: argparse._SubParsersAction) -> None:
    """No verb of its own: ``history`` lives under ``bench``."""


def run(args: argparse.Namespace) -> int:
    return fail(f"unknown verb {args.verb!r}", EXIT_BAD_INPUT)


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:
    from app.devtools.history_bench import DEFAULT_CHATS, DEFAULT_GIANT, DEFAULT_MESSAGES

    bench = kinds.add_parser(
        "history",
        help="the window with thousands of chats and a giant one: Qt-thread stalls, time to show, memory",
        description="Build a synthetic history in a temporary data folder (through the store), open the window "
        "offscreen, open the giant chat (the newest), scroll it top to bottom, switch between chats and scroll "
        "the chat list to its end; report the longest Qt-thread stall (the stall watchdog), the time to show "
        "the giant chat and RSS before/after, against the same steps on an empty history, in the same run. "
        "Targets: no stall above 50 ms, the giant chat shown within 150 ms, RSS within 30 MB of the empty "
        "history's.",
    )
    bench.add_argument("--chats", type=int, default=DEFAULT_CHATS, help=f"chats in all (default {DEFAULT_CHATS:,})")
    bench.add_argument(
        "--messages", type=int, default=DEFAULT_MESSAGES, help=f"messages in all (default {DEFAULT_MESSAGES:,})"
    )
    bench.add_argument(
        "--giant", type=int, default=DEFAULT_GIANT, help=f"messages in the newest chat (default {DEFAULT_GIANT:,})"
    )
    bench.add_argument("--json", action="store_true", help="print the figures as JSON")


def run_bench(args: argparse.Namespace) -> int:
    from app.devtools.history_bench import bench_history, check_sizes, report_lines

    problem = check_sizes(args.chats, args.messages, args.giant)
    if problem:
        return fail(problem, EXIT_BAD_INPUT)
    try:
        report = bench_history(args.chats, args.messages, args.giant)
    except RuntimeError as exc:
        return fail(str(exc), EXIT_FAILED)
    print(json.dumps(report, indent=2) if args.json else "\n".join(report_lines(report)))
    return 0
