"""``llm-workstation bench spec MODEL [--draft D]``: speculative decoding (off / n-gram / draft) on fixed prompts, in
one run (registered by ``app.cli.bench``; the work is ``app.devtools.spec_bench``)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from app.backends.protocol import BackendError
from app.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, fail, fail_error
from app.core.gguf.draft_compat import check_draft
from app.core.gguf.header import GgufFileError, read_gguf_header
from app.core.params import LoadParams


def add_spec_parser(kinds: argparse._SubParsersAction) -> None:
    spec = kinds.add_parser(
        "spec",
        help="speculative decoding: tok/s off / n-gram / draft on copy-edit-extract and free-writing prompts",
        description="Load MODEL without speculation, with n-gram lookup and (with --draft) with a draft model, and "
        "write the same fixed prompts at temperature 0 as text completions, the modes interleaved round by round "
        "(best round per prompt). Reports decode tok/s per mode and kind of prompt, the ratio against off, the "
        "acceptance rate, and a free-writing run with the app's speculation guard on. Every speculative text is "
        "compared with the text without speculation: a mismatch is printed and the exit status is 1.",
    )
    spec.add_argument("model", help="path to a .gguf file")
    spec.add_argument("--draft", default=None, help="a draft model (.gguf with the same tokenizer)")
    spec.add_argument("--ctx", type=int, default=2048)
    spec.add_argument("--max-tokens", type=int, default=96)
    spec.add_argument("--rounds", type=int, default=2, help="runs of every mode, interleaved (best per prompt)")
    spec.add_argument("--json", action="store_true")


def run_spec(args: argparse.Namespace) -> int:
    try:
        read_gguf_header(args.model)
    except GgufFileError as exc:
        return fail_error(exc)
    if args.draft and not (verdict := check_draft(args.draft, args.model)).ok:
        return fail(
            f"{Path(args.draft).name} cannot draft for {Path(args.model).name}: {verdict.reason}. "
            "Give a model with the same tokenizer, or leave out --draft.",
            EXIT_BAD_INPUT,
        )
    if args.rounds < 1 or args.max_tokens < 2:
        return fail("--rounds must be at least 1 and --max-tokens at least 2.", EXIT_BAD_INPUT)
    from app.devtools.spec_bench import bench_spec, report_lines

    load = LoadParams(n_ctx=args.ctx)
    try:
        report = asyncio.run(bench_spec(args.model, load, args.draft, args.max_tokens, args.rounds))
    except BackendError as exc:
        return fail_error(exc)
    print(json.dumps(report, indent=2) if args.json else "\n".join(report_lines(report)))
    return 0 if report["identical"] else EXIT_FAILED
