"""``llm-workstation models [--json]``: the local model library; ``bench library``: indexing speed.

Exit codes: 0 done, 2 bad input (a folder that does not exist, an unusable settings file). A broken model
file is not a failure: it is listed with its error, as in the window.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, fail, fail_error
from app.core.settings import SettingsError, load_settings
from app.core.units import MISSING, format_bytes
from app.services.library.index import LibraryEntry, LibraryRoots, ModelLibrary, human_count
from app.services.paths import app_paths

VERBS = ("models",)
BENCH_KINDS = ("library",)
COLUMNS = ("NAME", "ARCH", "PARAMS", "QUANT", "SIZE", "CONTEXT", "BACKEND", "SOURCE")


def add_parser(verbs: argparse._SubParsersAction) -> None:
    models = verbs.add_parser("models", help="the local model library: model folders, HF cache, Ollama's store")
    models.add_argument("--json", action="store_true", help="a JSON list of objects")
    models.add_argument(
        "--folder", action="append", default=[], metavar="DIR", help="index this folder too (repeatable)"
    )


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:
    bench = kinds.add_parser("library", help="index N generated GGUFs: first scan against a cached rescan")
    bench.add_argument("--files", type=int, default=200, help="how many GGUF files (default 200)")
    bench.add_argument("--runs", type=int, default=5, help="cached rescans measured (the median is reported)")
    bench.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    paths = app_paths()
    try:
        settings = load_settings(paths.settings_file)
    except SettingsError as exc:
        return fail_error(exc)
    extra = [Path(f).expanduser() for f in args.folder]
    for folder in extra:
        if not folder.is_dir():
            return fail(f"{folder} is not a folder. Pass an existing folder with --folder.", EXIT_BAD_INPUT)
    roots = LibraryRoots.from_settings(settings, paths)
    roots = LibraryRoots((*extra, *roots.folders), roots.hf_cache, roots.ollama, roots.optional)
    try:
        scan = ModelLibrary(roots, paths.cache_dir / "library-index.json").scan()
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)
    for problem in scan.problems:
        print(f"llm-workstation: {problem}", file=sys.stderr)
    entries = sorted(scan.entries, key=lambda e: (e.error is not None, e.name.lower()))
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=2))
    else:
        print(format_table(entries))
    return 0


def format_table(entries: list[LibraryEntry]) -> str:
    if not entries:
        return "No models found. Add a model folder in Settings, or pass --folder DIR."
    rows = [COLUMNS, *(_row(e) for e in entries)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    for entry in entries:
        if entry.error:
            lines.append(f"! {entry.name}: {entry.error}")
    return "\n".join(lines)


def _row(e: LibraryEntry) -> tuple[str, ...]:
    return (
        e.name,
        e.architecture or MISSING,
        human_count(e.parameter_count) or MISSING,
        e.quantization or MISSING,
        format_bytes(e.size_bytes),
        f"{e.context_length:,}" if e.context_length else MISSING,
        "error" if e.error else e.backend,
        e.source,
    )


def run_bench(args: argparse.Namespace) -> int:
    if args.files < 1 or args.runs < 1:
        return fail("--files and --runs must be at least 1.", EXIT_BAD_INPUT)
    from app.devtools.library_bench import bench_library

    report = bench_library(args.files, args.runs)
    print(json.dumps(report, indent=2) if args.json else "\n".join(_bench_lines(report)))
    return 0


def _bench_lines(r: dict[str, Any]) -> list[str]:
    return [
        f"Library indexing, {r['files']} GGUF files of {format_bytes(r['file_size_bytes'])} each (same run):",
        f"  first scan (every header read):  {r['first_scan_s'] * 1000:8.1f} ms  "
        f"({r['first_scan_headers_read']} headers read)",
        f"  cached rescan (median of {r['runs']}):    {r['cached_scan_s'] * 1000:8.1f} ms  "
        f"({r['cached_scan_headers_read']} headers read)",
        f"  speed-up: {r['speedup']}x",
    ]
