"""``llm-workstation batch`` and ``bench batch``: many requests through one OpenAI-compatible server.

Exit codes: 0 the batch ran (some input lines may have been bad — they are listed on stderr and skipped — and
some requests may have failed — they are in the output with their error and are retried by the same command);
1 the server failed (unreachable, refused the key, vLLM did not start) or every request failed; 2 bad input
(unreadable file, no runnable line, bad option); 130 cancelled with Ctrl-C (what finished is kept).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from app.cli.common import API_KEY_ENV, EXIT_BAD_INPUT, EXIT_INTERRUPTED, fail, fail_error
from app.core.batch.input import BatchInputError, InputProblem, load_batch_input
from app.core.units import MISSING, format_duration, format_tokens_per_s

if TYPE_CHECKING:
    from app.services.batch.runner import BatchProgress, BatchSummary

MAX_LISTED_PROBLEMS = 20
T = TypeVar("T")


# --- parsers ------------------------------------------------------------------------------------------------------


def _add_server_args(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8000")
    where.add_argument("--vllm-model", metavar="M", help="start vLLM with this model (folder or repo id) for the run")
    parser.add_argument(
        "--api-key",
        metavar="K",
        default=os.environ.get(API_KEY_ENV),
        help=f"the server's API key (default: ${API_KEY_ENV})",
    )
    parser.add_argument("--model", metavar="NAME", help="the served model name (default: what /v1/models lists)")
    vllm = parser.add_argument_group("vLLM options (with --vllm-model)")
    vllm.add_argument("--vllm-python", metavar="P", help="the vLLM environment's python (default: the app's)")
    vllm.add_argument("--max-model-len", type=int, metavar="N", help="context length in tokens")
    vllm.add_argument("--max-num-seqs", type=int, metavar="N", help="sequences vLLM batches at once")
    vllm.add_argument("--enforce-eager", action="store_true", help="skip graph compilation (starts faster)")
    vllm.add_argument(
        "--extra-vllm-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more vLLM flag; write --extra-vllm-arg=--enforce-eager",
    )


VERBS = ("batch",)
BENCH_KINDS = ("batch",)


def add_parser(verbs: argparse._SubParsersAction) -> None:
    """``batch INPUT (--endpoint URL | --vllm-model M) --output OUT.jsonl [--concurrency N] …``."""
    batch = verbs.add_parser(
        "batch",
        help="run a JSONL or CSV file of requests through a server; results go to a JSONL file as they finish",
        description="Run every request in INPUT (JSONL: {id, messages|prompt, …fields}; CSV: a prompt column). "
        "Re-running with the same --output skips the ids that already finished.",
    )
    batch.add_argument("input", metavar="INPUT", help="a .jsonl file (one request per line) or a .csv file")
    _add_server_args(batch)
    batch.add_argument("--output", "-o", required=True, metavar="OUT.jsonl", help="results, appended as they finish")
    batch.add_argument("--concurrency", "-c", type=int, default=8, metavar="N", help="requests in flight (default 8)")
    batch.add_argument("--shortest-first", action="store_true", help="launch the shortest prompts first")
    batch.add_argument("--priority", action="store_true", help="send vLLM request priorities (shorter first)")
    batch.add_argument("--chat", action="store_true", help="CSV prompts go to the chat endpoint as user messages")
    batch.add_argument("--json", action="store_true", help="print the summary as JSON")


def add_bench_parser(bench_kinds: argparse._SubParsersAction) -> None:
    """``bench batch``: the batch runner against a minimal asyncio + httpx client, at several concurrencies."""
    bench = bench_kinds.add_parser("batch", help="batch runner output tok/s against a minimal httpx client")
    _add_server_args(bench)
    bench.add_argument("--prompts", type=int, default=64, metavar="N", help="prompts in the seeded set (default 64)")
    bench.add_argument("--max-tokens", type=int, default=128, metavar="N", help="tokens per reply (default 128)")
    bench.add_argument("--concurrency", default="1,8,32", metavar="LIST", help="levels to measure (default 1,8,32)")
    bench.add_argument("--rounds", type=int, default=2, metavar="R", help="alternating runs per path and level")
    bench.add_argument("--json", action="store_true")


# --- batch --------------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """The ``batch`` verb; returns the exit code."""
    if args.concurrency < 1:
        return fail("--concurrency must be at least 1", EXIT_BAD_INPUT)
    try:
        loaded = load_batch_input(args.input, as_chat=args.chat)
    except BatchInputError as exc:
        return fail_error(exc)
    _list_problems(args.input, loaded.problems)
    for note in loaded.notes:
        print(f"note: {note}", file=sys.stderr)
    if not loaded.requests:
        return fail(f"no request in {args.input} can run; fix the lines listed above", EXIT_BAD_INPUT)
    from app.services.batch.runner import BatchRunner

    async def body(endpoint: str, model: str | None) -> Any:
        runner = BatchRunner(
            endpoint,
            api_key=args.api_key,
            model=model,
            concurrency=args.concurrency,
            order="shortest" if args.shortest_first else "input",
            priority=args.priority,
        )
        return await _cancellable(runner.cancel, runner.run(loaded.requests, args.output, _ProgressLine()))

    code, summary = _serve(args, body)
    if summary is None:
        return code
    if not summary.count and not summary.cancelled:
        print(f"nothing to do: all {summary.skipped} requests already finished in {args.output}", file=sys.stderr)
    _print_summary(summary, args, len(loaded.problems))
    if summary.cancelled:
        return fail(
            f"cancelled; finished results are in {args.output}, run the same command to continue", EXIT_INTERRUPTED
        )
    if summary.count and not summary.done:
        return fail(f"every request failed; the first: {summary.first_error}")
    return 0


def _list_problems(path: str, problems: list[InputProblem]) -> None:
    for problem in problems[:MAX_LISTED_PROBLEMS]:
        print(f"{path}: {problem}", file=sys.stderr)
    if len(problems) > MAX_LISTED_PROBLEMS:
        print(f"{path}: … and {len(problems) - MAX_LISTED_PROBLEMS} more bad lines", file=sys.stderr)
    if problems:
        print(f"note: {len(problems)} bad input lines are skipped; the others run", file=sys.stderr)


def _serve(args: argparse.Namespace, body: Callable[[str, str | None], Coroutine[Any, Any, T]]) -> tuple[int, T | None]:
    """Run ``body(endpoint, model)`` against --endpoint, or a vLLM started for it; map failures to exit codes."""
    from app.backends.server_url import normalize_server_url
    from app.services.batch.runner import BatchError

    try:
        if args.endpoint:
            endpoint = normalize_server_url(args.endpoint)
            return 0, asyncio.run(body(endpoint, args.model))
        return 0, asyncio.run(_with_vllm(args, body))
    except (ValueError, BatchError) as exc:  # ValueError: the endpoint, a runner option, the input or output file
        return fail_error(exc), None
    except OSError as exc:
        return fail(f"{exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}"), None
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED), None


async def _cancellable(cancel: Callable[[], None], work: Awaitable[T]) -> T:
    """Ctrl-C once: ``cancel()`` (keep what finished); twice: the default KeyboardInterrupt."""
    loop = asyncio.get_running_loop()

    def first_interrupt() -> None:
        print("\ncancelling… (Ctrl-C again to quit at once)", file=sys.stderr)
        loop.remove_signal_handler(signal.SIGINT)
        cancel()

    try:
        loop.add_signal_handler(signal.SIGINT, first_interrupt)
    except (NotImplementedError, RuntimeError):  # not the main thread, or no signal support here
        return await work
    try:
        return await work
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def _with_vllm(args: argparse.Namespace, body: Callable[[str, str | None], Coroutine[Any, Any, T]]) -> T:
    """Start vLLM with the command's options, run ``body`` against it, stop it whatever happens."""
    from app.core.vllm.options import VllmServerOptions, validate
    from app.services.batch.runner import BatchError
    from app.services.vllm.server import VllmServer, VllmServerError

    extra = list(args.extra_vllm_arg)
    if getattr(args, "priority", False) and not any(a.startswith("--scheduling-policy") for a in extra):
        extra += ["--scheduling-policy", "priority"]
    options = VllmServerOptions(
        model=args.vllm_model,
        served_model_name=args.model,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        enforce_eager=args.enforce_eager,
        api_key=args.api_key,
        extra_args=extra,
    )
    if problems := validate(options):
        raise BatchInputError(" ".join(problems))
    server = VllmServer(_vllm_python(args), options)
    print(f"starting vLLM with {args.vllm_model} (this can take a few minutes)…", file=sys.stderr)
    try:
        await server.start(on_phase=lambda event: print(f"vLLM: {event.phase} ({event.at_s:.0f} s)", file=sys.stderr))
    except VllmServerError as exc:  # start() has already stopped what it started
        raise BatchError(f"vLLM did not start: {' '.join(str(exc).split())}", kind=exc.kind) from None
    try:
        return await body(server.base_url, options.display_name)
    finally:
        await server.stop()


def _vllm_python(args: argparse.Namespace) -> str:
    if args.vllm_python:
        return str(args.vllm_python)
    from app.services.paths import app_paths
    from app.services.vllm.environment import VllmEnvironment

    found = VllmEnvironment(paths=app_paths()).candidates()
    if not found:
        raise BatchInputError("no vLLM installation found; pass --vllm-python PATH or install vLLM from the app")
    return str(found[0])


class _ProgressLine:
    """The progress line on stderr: rewritten in place on a terminal, a new line every 10 s otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.shown_at = 0.0

    def __call__(self, progress: BatchProgress) -> None:
        now = time.monotonic()
        finished = progress.done + progress.failed == progress.total
        if not self.tty and now - self.shown_at < 10 and not finished:
            return
        self.shown_at = now
        eta = "" if progress.eta_s is None or finished else f", ETA {format_duration(progress.eta_s)}"
        text = (
            f"batch: {progress.done + progress.failed}/{progress.total} finished, {progress.failed} failed, "
            f"{progress.in_flight} in flight, {format_tokens_per_s(progress.output_tokens_per_s)}{eta}"
        )
        if self.tty:
            sys.stderr.write(f"\r\033[K{text}" + ("\n" if finished else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()


def _ms(values: dict[str, float | None]) -> str:
    return "  ".join(f"{key} {MISSING if value is None else f'{value:,.0f}'}" for key, value in values.items())


def _print_summary(summary: BatchSummary, args: argparse.Namespace, bad_lines: int) -> None:
    if args.json:
        print(json.dumps({**summary.to_dict(), "bad_input_lines": bad_lines, "output": args.output}, indent=2))
        return
    for note in summary.notes:
        print(f"note: {note}", file=sys.stderr)
    lines = [
        f"model {summary.model}: {summary.count} requests, {summary.done} done, {summary.failed} failed, "
        f"{summary.skipped} skipped (already in {args.output}), {summary.wall_s:.1f} s",
        f"output: {summary.output_tokens:,} tokens, {format_tokens_per_s(summary.output_tokens_per_s)}",
        f"latency ms  {_ms(summary.latency_ms)}",
        f"TTFT ms     {_ms(summary.ttft_ms)}",
        f"results in {args.output}",
    ]
    if summary.failed:
        lines.append(f"{summary.failed} failed requests are retried when you run the same command again")
        lines.append(f"first error: {summary.first_error}")
    if bad_lines:
        lines.append(f"{bad_lines} bad input lines were skipped (listed above); fix them and run again to add them")
    print("\n".join(lines))


# --- bench batch --------------------------------------------------------------------------------------------------


def run_bench(args: argparse.Namespace) -> int:
    """The ``bench batch`` verb; returns the exit code."""
    try:
        levels = [int(part) for part in str(args.concurrency).split(",") if part.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1 or args.prompts < 1 or args.max_tokens < 1 or args.rounds < 1:
        return fail(
            "--concurrency takes a list such as 1,8,32; --prompts, --max-tokens and --rounds must be at least 1",
            EXIT_BAD_INPUT,
        )
    from app.devtools.batch_bench import bench_batch, report_lines

    def step(text: str) -> None:
        print(f"bench: {text}", file=sys.stderr)

    async def body(endpoint: str, model: str | None) -> dict[str, Any]:
        return await bench_batch(
            endpoint,
            model=model,
            api_key=args.api_key,
            prompts=args.prompts,
            max_tokens=args.max_tokens,
            concurrencies=levels,
            rounds=args.rounds,
            on_step=step,
        )

    code, report = _serve(args, body)
    if report is None:
        return code
    print(json.dumps(report, indent=2) if args.json else "\n".join(report_lines(report)))
    return 0
