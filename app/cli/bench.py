"""``llm-workstation bench run`` (the throughput table for one engine) and ``bench runs`` (saved runs, compare);
``bench spec`` (spec.py) and ``bench docs`` (docs_bench.py: the document index) are wired here too.

``bench run --backend llamacpp`` drives the app's llama.cpp worker, which runs one sequence: at concurrency
N > 1 the clients queue for it and the rows say so; ``--backend llamacpp --parallel`` instead runs N parallel
sequences in one llama.cpp context at concurrency N (engine ``llamacpp-parallel``: plain-text prompts without the
chat template, greedy, EOS ignored, a child process restarted per level). ``--backend vllm`` needs a running
server (``--endpoint``, default http://127.0.0.1:8000); ``--backend ollama`` a running Ollama (``--endpoint`` or
the settings' host), and prints skipped rows with the reason when there is none.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from app.cli import docs_bench, spec
from app.cli.common import API_KEY_ENV, EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, fail, fail_error
from app.core.bench.stats import BenchRow, text_table
from app.core.bench.workload import BenchWorkload, parse_concurrencies, parse_levels

VERBS: tuple[str, ...] = ()
BENCH_KINDS = ("run", "runs", "spec", "docs")


def add_parser(verbs: argparse._SubParsersAction) -> None:
    """No verb of its own: ``run`` and ``runs`` live under ``bench``."""


def run(args: argparse.Namespace) -> int:
    return fail(f"unknown verb {args.verb!r}", EXIT_BAD_INPUT)


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:
    defaults = BenchWorkload()
    bench = kinds.add_parser(
        "run",
        help="throughput, TTFT and latency percentiles, peak memory and KV per concurrency, for one engine",
        description="Run the fixed, seeded bench workload against one engine at each concurrency: warm-up, then "
        "--requests prompts (24/96/384 words, 50/30/20 %) by N closed-loop clients. Each prompt starts with the "
        "tag [run <nonce> c<N> r<k>] (nonce: random per run, saved in the result's workload), so no level or "
        "later run reuses another's prompt prefix cache. llama.cpp runs one stream: at N > 1 the clients queue "
        "for it and the rows say so; with --parallel it runs N parallel sequences in one context (--ctx tokens "
        "each; plain-text prompts without the chat template, greedy, EOS ignored: a raw throughput figure). "
        "vLLM replies ignore EOS (exactly --max-tokens). Max sustained: the most "
        "replies the engine ran at once without errors (vLLM: capped at the peak running requests in /metrics; "
        "Ollama: unknown, it queues beyond OLLAMA_NUM_PARALLEL).",
    )
    bench.add_argument("--backend", required=True, choices=("llamacpp", "vllm", "ollama"))
    bench.add_argument("--model", default="", help="GGUF path (llamacpp), served name (vllm) or Ollama model name")
    bench.add_argument("--endpoint", default=None, help="vLLM server URL or Ollama host")
    bench.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"the vLLM server's API key (default: ${API_KEY_ENV}; prefer it: a command line is visible to others)",
    )
    bench.add_argument("--server-pid", type=int, default=None, help="PID of a local vLLM server (default: by port)")
    bench.add_argument("--concurrency", default="1,8,32", help="comma-separated levels (default 1,8,32)")
    bench.add_argument("--requests", type=int, default=defaults.requests, help="measured requests per level")
    bench.add_argument("--max-tokens", type=int, default=defaults.max_tokens)
    bench.add_argument("--warmup", type=int, default=defaults.warmup, help="warm-up requests per level")
    bench.add_argument("--repetitions", type=int, default=defaults.repetitions)
    bench.add_argument("--seed", type=int, default=defaults.seed)
    bench.add_argument("--prompt-words", default=None, help="prompt lengths in words, e.g. 24,96,384")
    bench.add_argument("--ctx", type=int, default=4096, help="context size (llama.cpp, Ollama)")
    bench.add_argument("--parallel", action="store_true",
                       help="llamacpp: concurrency N runs N parallel sequences in one context (engine "
                       "llamacpp-parallel; plain-text prompts, no chat template)")  # fmt: skip
    bench.add_argument("--save", action="store_true", help="save the run (with this machine's description)")
    bench.add_argument("--json", action="store_true")
    runs = kinds.add_parser("runs", help="list saved bench runs, or compare two (--compare OLD NEW)")
    runs.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), default=None)
    runs.add_argument("--json", action="store_true")
    spec.add_spec_parser(kinds)
    docs_bench.add_docs_bench_parser(kinds)


def run_bench(args: argparse.Namespace) -> int:
    try:
        if args.bench_kind == "spec":
            return spec.run_spec(args)
        if args.bench_kind == "docs":
            return docs_bench.run_docs_bench(args)
        return _bench_run(args) if args.bench_kind == "run" else _bench_runs(args)
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)


def _workload(args: argparse.Namespace) -> BenchWorkload:
    """Raises ValueError with a readable message."""
    defaults = BenchWorkload()
    words, weights = defaults.prompt_words, defaults.prompt_weights
    if args.prompt_words:
        words = parse_levels(args.prompt_words, "prompt length (--prompt-words)", 100_000)
        weights = tuple(1.0 for _ in words)
    workload = BenchWorkload(
        concurrencies=parse_concurrencies(args.concurrency),
        requests=args.requests,
        max_tokens=args.max_tokens,
        warmup=args.warmup,
        repetitions=args.repetitions,
        seed=args.seed,
        prompt_words=words,
        prompt_weights=weights,
    )
    if problems := workload.problems():
        raise ValueError(" ".join(problems))
    return workload


def _target(args: argparse.Namespace) -> Any:
    from app.core.gguf.header import GgufFileError, read_gguf_header
    from app.services.bench.engines import BenchTarget

    if args.backend == "llamacpp":
        if not args.model:
            raise ValueError("--model must name a .gguf file for --backend llamacpp")
        try:
            read_gguf_header(args.model)
        except GgufFileError as exc:
            raise ValueError(str(exc)) from None
    if args.backend == "ollama" and not args.model:
        raise ValueError("--model must name an Ollama model (see `llm-workstation ollama list`)")
    if args.parallel and args.backend != "llamacpp":
        raise ValueError("--parallel is for --backend llamacpp (vLLM and Ollama batch on their own)")
    if args.ctx < 16:
        raise ValueError("--ctx must be at least 16 tokens")
    return BenchTarget(
        backend=args.backend,
        model=str(Path(args.model).resolve()) if args.backend == "llamacpp" else args.model,
        endpoint=args.endpoint or ("http://127.0.0.1:8000" if args.backend == "vllm" else None),
        api_key=args.api_key,
        n_ctx=args.ctx,
        server_pid=args.server_pid,
        vllm_python=_vllm_python() if args.backend == "vllm" else None,
        parallel=bool(args.parallel),
    )


def _vllm_python() -> str | None:
    from app.core.settings import SettingsError, load_settings
    from app.services.paths import app_paths

    try:
        return load_settings(app_paths().settings_file).vllm_python or None
    except SettingsError:
        return None


def _bench_run(args: argparse.Namespace) -> int:
    from app.services.bench.run import BenchRunError, run_bench

    try:
        workload, target = _workload(args), _target(args)
    except ValueError as exc:
        return fail_error(exc)

    def progress(step: Any) -> None:
        if not args.json and sys.stderr.isatty():
            print(f"\r{step.text():<60}", end="", file=sys.stderr, flush=True)

    try:
        result = asyncio.run(run_bench(target, workload, progress=progress))
    except BenchRunError as exc:  # settings that cannot run; an engine that fails gives skipped rows instead
        return fail_error(exc)
    if sys.stderr.isatty() and not args.json:
        print(file=sys.stderr)
    if args.save:
        from app.services.bench.store import BenchStoreError

        try:
            result["id"] = _store().save(result)
        except BenchStoreError as exc:
            return fail_error(exc)
    rows = [BenchRow.from_dict(r) for r in result["rows"]]
    print(json.dumps(result, indent=2) if args.json else _run_text(result, rows))
    skipped = [r for r in rows if r.skipped]
    if skipped and len(skipped) == len(rows):
        return fail(skipped[0].skipped or "every configuration was skipped", EXIT_FAILED)
    return 0


def _run_text(result: dict[str, Any], rows: list[BenchRow]) -> str:
    machine = result.get("machine", {})
    gpus = ", ".join(g["name"] for g in machine.get("gpus", [])) or machine.get("gpu_unavailable_reason") or "none"
    lines = [
        f"model {result['target'].get('model_name')}  engine {result['target']['backend']}",
        f"machine: {machine.get('cpu_model')} ({machine.get('cpu_threads')} threads), GPU: {gpus}",
        "",
        text_table(rows),
    ]
    if result.get("id"):
        lines.append(f"\nsaved as {result['id']}")
    return "\n".join(lines)


def _store() -> Any:
    from app.services.bench.store import BenchStore
    from app.services.paths import app_paths

    return BenchStore(app_paths().data_dir / "bench")


def _bench_runs(args: argparse.Namespace) -> int:
    from app.services.bench.store import BenchStoreError

    store = _store()
    if args.compare:
        try:
            ratios = store.compare(*args.compare)
        except BenchStoreError as exc:
            return fail_error(exc)
        if args.json:
            print(json.dumps({"before": args.compare[0], "after": args.compare[1], "rows": ratios}, indent=2))
        else:
            print("\n".join(_compare_lines(args.compare, ratios)))
        return 0
    runs = store.runs()
    if args.json:
        print(json.dumps([r.__dict__ | {"concurrencies": list(r.concurrencies)} for r in runs], indent=2))
    else:
        print("\n".join(f"{r.id}  {r.label()}" for r in runs) or "no saved runs yet: `bench run ... --save`")
    return 0


def _compare_lines(ids: list[str], ratios: list[dict[str, Any]]) -> list[str]:
    def fmt(value: float | None) -> str:
        return f"{value:.2f}x" if value is not None else "—"

    lines = [f"{ids[1]} / {ids[0]} (ratios; tok/s above 1 is faster, latency below 1 is faster)",
             f"{'engine':<9} {'conc':>5} {'tok/s':>7} {'TTFT p50':>9} {'TTFT p90':>9} {'lat p50':>8} "
             f"{'lat p90':>8} {'memory':>7}"]  # fmt: skip
    for r in ratios:
        lines.append(
            f"{r['backend']:<9} {r['concurrency']:>5} {fmt(r['output_tokens_per_s_ratio']):>7} "
            f"{fmt(r['ttft_p50_ms_ratio']):>9} {fmt(r['ttft_p90_ms_ratio']):>9} {fmt(r['latency_p50_ms_ratio']):>8} "
            f"{fmt(r['latency_p90_ms_ratio']):>8} {fmt(r['peak_memory_bytes_ratio']):>7}"
        )
    if not ratios:
        lines.append("the two runs share no engine and concurrency")
    return lines
