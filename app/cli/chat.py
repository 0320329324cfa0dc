"""The CLI verbs: each returns an exit code and prints a one-line reason on failure, never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from app.backends.protocol import BackendError
from app.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, fail, fail_error
from app.core.chat.conversation import ReplyStats
from app.core.errors import NotFoundError
from app.core.gguf.header import GgufFileError, read_gguf_header
from app.core.load_checks import context_beyond_training, memory_refusal
from app.core.params import LoadParams, SamplingParams
from app.core.speculative import acceptance, speculative_problem


def run(args: argparse.Namespace) -> int:
    handlers = {"chat": chat, "bench": bench, "starter-model": starter_model}
    try:
        return handlers[args.verb](args)
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)


def chat(args: argparse.Namespace) -> int:
    try:
        header = read_gguf_header(args.model)
    except GgufFileError as exc:
        return fail_error(exc)
    load = LoadParams(n_ctx=args.ctx, chat_format=args.chat_format, n_gpu_layers=args.gpu_layers, speculative=args.spec)
    if problems := load.problems() + [p for p in [speculative_problem(args.spec)] if p]:
        return fail(" ".join(problems), EXIT_BAD_INPUT)
    from app.services.monitor.machine_memory import read_machine_memory

    if refusal := memory_refusal(header, load, read_machine_memory()):  # at once, before any worker starts
        return fail(refusal, EXIT_BAD_INPUT)
    sampling = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed)
    messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
        {"role": "user", "content": args.prompt}
    ]
    try:
        result = asyncio.run(_chat(args.model, load, sampling, messages, getattr(args, "docs", None)))
    except NotFoundError as exc:  # --docs names nothing the index or the disk holds
        return fail(str(exc), EXIT_BAD_INPUT)
    except BackendError as exc:  # a request that cannot work as asked (LoadRefusedError) is bad input
        print(file=sys.stdout, flush=True)
        return fail_error(exc)
    if result.get("spec_mode", "off") != "off":
        print(
            f"note: speculative decoding ({result['spec_mode']}): {result['accepted']} of {result['drafted']} drafted "
            f"tokens accepted ({(result['acceptance'] or 0):.0%})",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(result))
    return 0


async def _chat(
    model: str, load: LoadParams, sampling: SamplingParams, messages: list[dict[str, str]], docs: str | None = None
) -> dict:
    """One reply through the engine host, as the window and the API server get theirs; with ``docs``, answered from
    those documents (whole or passages, cited)."""
    from app.backends.llamacpp.backend import LlamaCppBackend
    from app.cli.chat_docs import DocumentsForChat, figures, sources_lines
    from app.services.engines.entries import EngineKind
    from app.services.engines.host import EngineHost
    from app.services.paths import app_paths

    # chat() has checked the memory; the worker still refuses what RAM cannot hold
    host = EngineHost(LlamaCppBackend(kernel_fallback_marker=app_paths().llama_kernel_fallback))
    documents = DocumentsForChat(docs) if docs else None
    try:
        if documents is not None:
            await documents.attach(host)  # before the model loads: a wrong name fails at once
        info = await host.load(model, load)
        if info.chat_format is not None and load.chat_format is None:
            print(f"note: {info.chat_format_reason}", file=sys.stderr)
        if warning := context_beyond_training(info.n_ctx, info.n_ctx_train):
            print(f"warning: {warning}", file=sys.stderr)
        parts: list[str] = []
        prompt, context = await documents.prompt(host, messages, sampling) if documents else (messages, None)
        reply = host.stream_chat(EngineKind.LLAMACPP, prompt, sampling)
        async for delta in reply:
            parts.append(delta.text)
            sys.stdout.write(delta.text)
            sys.stdout.flush()
        print()
        for line in sources_lines(context):
            print(line)
        stats, kv = reply.stats, host.llamacpp.kv_usage()
        return {
            "text": "".join(parts),
            **(stats.to_dict() if stats else {}),
            **_speculation_figures(stats),
            "kv_used_cells": kv.used_cells if kv else None,
            "n_ctx": info.n_ctx,
            "chat_format": info.chat_format,
            "model": info.name,
            **figures(context),
        }
    finally:
        await host.close()
        if documents is not None:
            await documents.close()


def _speculation_figures(stats: ReplyStats | None) -> dict[str, Any]:
    """The reply's speculative decoding: mode ("off" without), drafted and accepted tokens, acceptance rate."""
    if stats is None:
        return {}
    rate = acceptance(stats.spec_drafted, stats.spec_accepted)
    return {
        "spec_mode": stats.spec_mode or "off",
        "drafted": stats.spec_drafted,
        "accepted": stats.spec_accepted,
        "acceptance": round(rate, 4) if rate is not None else None,
    }


def bench(args: argparse.Namespace) -> int:
    if args.bench_kind == "startup":
        from app.devtools.startup_bench import bench_startup

        return _print_report(bench_startup(args.runs), args.json, _startup_lines)
    try:
        read_gguf_header(args.model)
    except GgufFileError as exc:
        return fail_error(exc)
    load = LoadParams(n_ctx=args.ctx, chat_format=args.chat_format, n_threads=args.threads)
    if args.turns is not None:
        return _bench_turns(args, load)
    from app.devtools.chat_bench import bench_chat

    try:
        report = asyncio.run(bench_chat(args.model, load, args.max_tokens, args.runs))
    except BackendError as exc:
        return fail_error(exc)
    return _print_report(report, args.json, _chat_bench_lines)


def _bench_turns(args: argparse.Namespace, load: LoadParams) -> int:
    from app.devtools.turns_bench import bench_turns, report_lines

    if args.turns < 2:
        print("error: --turns needs at least 2 turns (the last is compared with the first).", file=sys.stderr)
        return 2
    try:
        report = asyncio.run(bench_turns(args.model, load, args.turns, args.max_tokens, args.runs))
    except BackendError as exc:
        return fail_error(exc)
    return _print_report(report, args.json, report_lines)


def _print_report(report: dict[str, Any], as_json: bool, lines: Any) -> int:
    print(json.dumps(report, indent=2) if as_json else "\n".join(lines(report)))
    return 0


def _chat_bench_lines(r: dict[str, Any]) -> list[str]:
    return [
        f"model {r['model']}  n_ctx {r['n_ctx']}  max_tokens {r['max_tokens']}  runs {r['runs']} (medians)",
        f"raw llama-cpp-python : decode {r['raw']['decode_tokens_per_s']:.1f} tok/s  TTFT {r['raw']['ttft_ms']:.1f} ms",
        f"app (worker process) : decode {r['app']['decode_tokens_per_s']:.1f} tok/s  TTFT {r['app']['ttft_ms']:.1f} ms",
        f"decode ratio app/raw : {r['decode_ratio']:.3f}   (target >= 0.97)",
        f"TTFT overhead        : {r['ttft_overhead_ms']:+.1f} ms (target <= 25 ms)",
    ]


def _startup_lines(r: dict[str, Any]) -> list[str]:
    return [
        f"runs {r['runs']} (medians)",
        f"bare Qt window shown          : {r['baseline_window_shown_s']:.3f} s",
        f"LLM Workstation window shown  : {r['window_shown_s']:.3f} s   (target <= 1.0 s)",
        f"ratio app/bare                : {r['ratio']:.2f}",
        f"idle resident memory          : {r['idle_rss_mb']:.0f} MB (bare Qt: {r['baseline_rss_mb']:.0f} MB; "
        "target <= 250 MB)",
        f"heavy modules imported        : {', '.join(r['heavy_modules']) or 'none'}",
    ]


def starter_model(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.services.paths import app_paths
    from app.services.starter_model import NOTE, StarterModelError, ensure_starter_model

    folder = Path(args.dir) if args.dir else app_paths().models_dir
    try:
        path = ensure_starter_model(folder)
    except StarterModelError as exc:
        return fail_error(exc, {"models_dir": "--dir"})
    print(path)
    print(NOTE, file=sys.stderr)
    return 0
