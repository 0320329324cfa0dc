"""``llm-workstation bench render``: the chat view's cost per streaming flush while a table grows, and of
showing a 5000×50 table once. Runs offscreen (``QT_QPA_PLATFORM=offscreen`` unless set).

Exit codes: 0 done; 2 bad input.
"""

from __future__ import annotations

import argparse
import json

from app.cli.common import EXIT_BAD_INPUT, fail

VERBS: tuple[str, ...] = ()
BENCH_KINDS = ("render",)
FLUSH_TARGET = 2.0  # the last size's flush may cost at most this many times the first's


def add_parser(verbs: argparse._SubParsersAction) -> None:
    """No verb of its own: ``render`` lives under ``bench``."""


def run(args: argparse.Namespace) -> int:
    return fail(f"unknown verb {args.verb!r}", EXIT_BAD_INPUT)


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:
    bench = kinds.add_parser(
        "render",
        help="the chat view's cost per streaming flush at 20, 100 and 400 table rows, and of a 5000×50 table once",
        description="Stream a reply that is one long table into a real chat view (offscreen), one row per flush, "
        "and time a flush (with the layout and paint it causes) at 20, 100 and 400 rows; then show a 5000×50 "
        f"table once. Target: the 400-row flush at most {FLUSH_TARGET:g}× the 20-row flush.",
    )
    bench.add_argument("--samples", type=int, default=15, help="flushes timed at each size (median; default 15)")
    bench.add_argument(
        "--compare", action="store_true", help="also time flushes with tables re-rendered whole, as before"
    )
    bench.add_argument("--json", action="store_true", help="print the figures as JSON")


def run_bench(args: argparse.Namespace) -> int:
    if not 1 <= args.samples <= 1000:
        return fail(f"--samples must be between 1 and 1000 (got {args.samples}).", EXIT_BAD_INPUT)
    from app.ui.devtools.render_bench import bench_render, report_lines

    report = bench_render(samples=args.samples, compare=args.compare)
    report["target_ratio"] = FLUSH_TARGET
    report["target_met"] = report["ratio_last_first"] <= FLUSH_TARGET
    print(json.dumps(report, indent=2) if args.json else "\n".join(report_lines(report)))
    return 0
