"""``llm-workstation modelfile parse|check|fmt FILE``: Ollama's parser, its errors, its exit codes; ``bench
modelfile``: the parser's speed and linearity on the largest Modelfile let through."""

from __future__ import annotations

import argparse
import json
import sys

from app.cli.common import EXIT_BAD_INPUT, fail, fail_error
from app.core.modelfile.params import check_modelfile
from app.core.modelfile.parser import Modelfile, ModelfileError, parse_modelfile, read_modelfile
from app.core.user_files import UserFileError

VERBS = ("modelfile",)
BENCH_KINDS = ("modelfile",)


def add_parser(verbs: argparse._SubParsersAction) -> None:
    modelfile = verbs.add_parser("modelfile", help="parse, check and format Ollama Modelfiles")
    actions = modelfile.add_subparsers(dest="modelfile_action", metavar="ACTION", required=True)
    parse = actions.add_parser("parse", help="print the instructions as Ollama's parser reads them")
    parse.add_argument("file")
    parse.add_argument("--json", action="store_true", help="a JSON list of instructions")
    check = actions.add_parser("check", help="parse and validate PARAMETER types as `ollama create` does")
    check.add_argument("file")
    fmt = actions.add_parser("fmt", help="print the canonical text")
    fmt.add_argument("file")


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:
    bench = kinds.add_parser("modelfile", help="parse and format 1 MiB Modelfiles of each shape; linearity ratios")
    bench.add_argument("--size", type=int, default=None, help="bytes per Modelfile (default: the 1 MiB limit)")
    bench.add_argument("--runs", type=int, default=3, help="repetitions per measurement (the best is reported)")
    bench.add_argument("--json", action="store_true")


def run_bench(args: argparse.Namespace) -> int:
    from app.core.modelfile.parser import MAX_MODELFILE_BYTES
    from app.devtools.modelfile_bench import bench_lines, bench_modelfile

    size = MAX_MODELFILE_BYTES if args.size is None else args.size
    if size < 1024 or args.runs < 1:
        return fail("--size must be at least 1024 and --runs at least 1.", EXIT_BAD_INPUT)
    report = bench_modelfile(size, args.runs)
    print(json.dumps(report, indent=2) if args.json else "\n".join(bench_lines(report)))
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        data = read_modelfile(args.file)  # a FIFO, a device or a file over 1 MiB is refused before reading
    except UserFileError as exc:
        return fail_error(exc)
    except OSError as exc:
        return fail(f"cannot read {args.file}: {exc.strerror or exc}", EXIT_BAD_INPUT)
    try:
        modelfile = parse_modelfile(data)
    except ModelfileError as exc:
        print(str(exc), file=sys.stderr)  # Ollama's own text, without the prefix, as `ollama create` prints it
        return EXIT_BAD_INPUT
    return {"parse": _parse, "check": _check, "fmt": _fmt}[args.modelfile_action](modelfile, args)


def _parse(modelfile: Modelfile, args: argparse.Namespace) -> int:
    instructions = modelfile.instructions()
    if args.json:
        print(json.dumps(instructions, ensure_ascii=False, indent=2))
        return 0
    for item in instructions:
        label = " ".join(item[key] for key in ("instruction", "name", "role") if key in item)
        print(f"{label}: {item['value']!r}")
    return 0


def _check(modelfile: Modelfile, _args: argparse.Namespace) -> int:
    result = check_modelfile(modelfile)
    for warning in result.warnings:
        print(warning, file=sys.stderr)
    for problem in result.problems:
        print(problem, file=sys.stderr)
    if result.problems:
        return EXIT_BAD_INPUT
    print(f"ok: {len(modelfile.commands)} instructions, {len(result.parameters)} parameters")
    return 0


def _fmt(modelfile: Modelfile, _args: argparse.Namespace) -> int:
    try:
        sys.stdout.write(modelfile.format())
    except ModelfileError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0
