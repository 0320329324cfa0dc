"""``llm-workstation bench docs``: the document index's indexing rate, search latency and retrieval quality
(app/services/bench/docs.py says what each figure is). A table, or ``--json``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from app.cli.common import EXIT_BAD_INPUT, fail, fail_error
from app.core.bench.workload import parse_levels


def add_docs_bench_parser(kinds: argparse._SubParsersAction) -> None:
    bench = kinds.add_parser(
        "docs",
        help="documents: indexing pages/s and MB/s, search p50/p95, recall@5 on real PDFs (keyword and hybrid)",
        description="Index a generated corpus (fpdf2 PDFs, text and Markdown) and --pdf DIR through the documents "
        "service, keyword only and, with --embedding-model, with every chunk embedded; time keyword and hybrid "
        "search at each --chunks size (hybrid with random unit vectors: the model's query embedding is not in "
        "it); score recall@5 of the page that answers each question of the question set (two PDFs Debian "
        "installs; skipped when they are missing).",
    )
    bench.add_argument("--pdfs", type=int, default=12, help="generated PDFs (default: %(default)s)")
    bench.add_argument("--pages", type=int, default=10, help="pages per generated PDF (default: %(default)s)")
    bench.add_argument("--texts", type=int, default=24, help="generated text and Markdown files (default: %(default)s)")
    bench.add_argument("--pdf", default=None, metavar="DIR", help="a folder of real PDFs to index as well")
    bench.add_argument("--chunks", default="10000,100000", help="index sizes for search latency (default: %(default)s)")
    bench.add_argument("--queries", type=int, default=200, help="searches timed per size and mode")
    bench.add_argument("--questions", default=None, metavar="FILE", help="a question set (JSON; default: the app's)")
    bench.add_argument("--embedding-model", default=None, metavar="PATH", help="a GGUF embedding model: hybrid rows")
    bench.add_argument("--json", action="store_true")


def run_docs_bench(args: argparse.Namespace) -> int:
    from app.services.bench.docs import QUESTIONS, DocsBenchOptions

    try:
        chunks = parse_levels(args.chunks, "index size (--chunks)", 10_000_000)
    except ValueError as exc:
        return fail_error(exc)
    if min(args.pdfs, args.pages, args.texts) < 0 or args.pdfs + args.texts == 0 or args.queries < 2:
        return fail("--pdfs, --pages, --texts must not be negative, one file at least, --queries 2 or more",
                    EXIT_BAD_INPUT)  # fmt: skip
    if args.pdf and not Path(args.pdf).is_dir():
        return fail(f"--pdf {args.pdf}: not a folder", EXIT_BAD_INPUT)
    if args.embedding_model and not Path(args.embedding_model).is_file():
        return fail(f"--embedding-model {args.embedding_model}: no such file", EXIT_BAD_INPUT)
    questions = Path(args.questions) if args.questions else QUESTIONS
    if args.questions and not questions.is_file():
        return fail(f"--questions {args.questions}: no such file", EXIT_BAD_INPUT)
    model = str(Path(args.embedding_model).resolve()) if args.embedding_model else None
    options = DocsBenchOptions(
        pdfs=args.pdfs, pages_per_pdf=args.pages, texts=args.texts, pdf_dir=args.pdf, chunks=tuple(chunks),
        queries=args.queries, questions=questions, embedding_model=model,
    )  # fmt: skip
    result = asyncio.run(_run(options))
    print(json.dumps(result, indent=2) if args.json else _text(result))
    return 0


async def _run(options: Any) -> dict[str, Any]:
    from app.services.bench import docs
    from app.services.bench.machine_info import cpu_model

    def progress(text: str) -> None:
        if sys.stderr.isatty():
            print(f"\r{text:<60}", end="", file=sys.stderr, flush=True)

    workstation, embedder = None, None
    if options.embedding_model:
        workstation, embedder = _embedder(options.embedding_model)
        await asyncio.to_thread(workstation.model_settings.load)
    try:
        result = await docs.run(options, embedder, progress)
    finally:
        if workstation is not None:
            await workstation.close()
    if sys.stderr.isatty():
        print(file=sys.stderr)
    import os

    machine = {"cpu_model": cpu_model(), "cpu_threads": os.cpu_count()}
    return {"machine": machine, "embedding_model": options.embedding_model, **result.as_dict()}


def _embedder(model: str) -> tuple[Any, Any]:
    """The app's embedder for ``model``: the Workstation's engine host runs it with the model's load settings, as
    the documents service does."""
    from app.services.documents.embedder import HostEmbedder
    from app.services.paths import app_paths
    from app.services.workstation import Workstation

    workstation = Workstation.create(app_paths().ensure())
    return workstation, HostEmbedder(workstation.host, model, lambda: workstation.model_settings.effective_load(model))


def _text(result: dict[str, Any]) -> str:
    from app.services.bench.docs import DocsBenchResult, text_report

    machine = result["machine"]
    parts = {key: result[key] for key in ("indexing", "search", "quality", "notes")}
    head = f"machine: {machine['cpu_model']} ({machine['cpu_threads']} threads)"
    model = f"embedding model: {result['embedding_model'] or 'none (hybrid rows need --embedding-model)'}"
    return "\n".join([head, model, "", text_report(DocsBenchResult(**parts))])
