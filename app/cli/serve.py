"""``llm-workstation serve``: the OpenAI- and Anthropic-compatible API server, headless (no Qt is imported), with
its own engine host. ``bench serve`` measures it (``app.devtools.serve_bench``).

It prints the base URL alone on stdout once it accepts connections (OpenAI clients use URL/v1, Anthropic clients
URL). The default port is 8417 (``--port 0`` picks a free one). It listens on 127.0.0.1 unless ``--host`` says
otherwise, and an address other machines can reach needs an API key (``--api-key`` or ``$LLMW_API_KEY``; prefer
the variable: a command line is visible to other users). SIGTERM or Ctrl-C stops it: replies in flight end,
models unload, exit 0 (130 after Ctrl-C).

Exit codes: 0 stopped by SIGTERM; 2 bad input (a non-loopback host without a key, a port in use, a folder that
does not exist, an unusable settings file); 1 another failure; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.common import API_KEY_ENV, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, fail, fail_error
from app.core.errors import AppError

if TYPE_CHECKING:
    from app.core.params import LoadParams
    from app.services.api.config import ServerConfig
    from app.services.workstation import Workstation

VERBS = ("serve",)
BENCH_KINDS = ("serve",)
VLLM_KEY_ENV = "VLLM_API_KEY"
OPTIONS = {
    "api_key": f"--api-key or ${API_KEY_ENV}",
    "port": "--port",
    "host": "--host",
    "n_ctx": "--ctx",
    "n_parallel": "--parallel",
}


def add_parser(verbs: argparse._SubParsersAction) -> None:
    from app.services.api.defaults import DEFAULT_IDLE_TTL_S, DEFAULT_MAX_QUEUE, DEFAULT_PORT

    serve = verbs.add_parser(
        "serve",
        help="serve the models over OpenAI- and Anthropic-compatible HTTP APIs (headless)",
        description="Serve every model the library and the engines have over one base URL: /v1/chat/completions, "
        "/v1/completions, /v1/embeddings, /v1/models (OpenAI) and /v1/messages (Anthropic). A GGUF runs in "
        "llama.cpp (loaded on first use with its saved settings), an Ollama model in Ollama, a vLLM model on the "
        "vLLM server (--vllm-url).",
    )
    add = serve.add_argument
    add("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1: this machine only)")
    add("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0 picks a free one")
    add("--api-key", default=None, help=f"the key clients send (default ${API_KEY_ENV}; prefer it: argv shows in ps)")
    add("--models-dir", action="append", default=[], metavar="DIR", help="serve this folder's GGUFs too (repeatable)")
    add(
        "--ttl",
        type=float,
        default=DEFAULT_IDLE_TTL_S,
        metavar="SECONDS",
        help=f"unload a model idle this long (default {DEFAULT_IDLE_TTL_S:.0f}; 0: after each request; -1: never)",
    )
    add("--cors-origin", action="append", default=[], metavar="ORIGIN", help="allow browser pages from this origin")
    add("--max-queue", type=int, default=DEFAULT_MAX_QUEUE, help="requests that may wait for llama.cpp or Ollama")
    add(
        "--ctx",
        type=_context_size,
        default=None,
        metavar="TOKENS",
        help="load every model with this context (default: each model's own setting); a request that needs more "
        "reloads its model with a larger context when memory allows, up to the model's trained context",
    )
    add(
        "--parallel",
        type=_parallel,
        default=None,
        metavar="N|auto",
        help="run up to N llama.cpp requests at once per model (continuous batching; each gets the full context), "
        "over each model's own setting; auto: as many as fit by the memory estimate (up to 4), whatever the models' "
        "settings; 1: one at a time. Default: each model's setting, else as many as fit (as auto)",
    )
    add("--vllm-url", default=None, metavar="URL", help=f"serve this vLLM server's model too (key: ${VLLM_KEY_ENV})")
    serve.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:
    bench = kinds.add_parser(
        "serve", help="the API server against raw llama-cpp-python, llama_cpp.server and (optionally) vLLM",
        description="On the starter model: one stream through the API against raw llama-cpp-python in-process and "
        "against `python -m llama_cpp.server` (same model and settings; the bench extra installs it); with "
        "--vllm-url, concurrency 32 through the API against the same client straight to vLLM.",
    )  # fmt: skip
    bench.add_argument("--runs", type=int, default=5, help="measured runs per path (after one warm-up)")
    bench.add_argument("--max-tokens", type=int, default=128)
    bench.add_argument("--ctx", type=int, default=2048)
    bench.add_argument("--threads", type=int, default=None)
    bench.add_argument("--model", default=None, help="a GGUF (default: the starter model, into a temp folder)")
    bench.add_argument("--chat-format", default="gemma", help="the chat format for every path (default gemma)")
    bench.add_argument("--no-baseline-server", action="store_true", help="skip python -m llama_cpp.server")
    bench.add_argument("--no-repack", action="store_true", help="llama.cpp's weight repacking off on every path "
                       "(on already where the app's worker fell back to it)")  # fmt: skip
    bench.add_argument("--vllm-url", default=None, help="a running vLLM server: also measure concurrency 32")
    bench.add_argument("--vllm-requests", type=int, default=96, help="requests per vLLM measurement")
    bench.add_argument(
        "--concurrency",
        type=int,
        default=None,
        metavar="N",
        help="instead: 1, 2, 4, 8 … streams at once through serve --parallel N (continuous batching) "
        "against the queued mode (one at a time), same run: aggregate decode tok/s and TTFT p50/p95",
    )
    bench.add_argument("--rounds", type=int, default=2, help="with --concurrency: chats per stream and level")
    bench.add_argument("--repeats", type=int, default=3, help="with --concurrency: sweeps over the levels (medians)")
    bench.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from app.services.api.config import ServerConfig

    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None
    folders = [Path(d).expanduser() for d in args.models_dir]
    for folder in folders:
        if not folder.is_dir():
            return fail(f"{folder} is not a folder. Pass an existing folder with --models-dir.", EXIT_BAD_INPUT)
    config = ServerConfig(
        host=args.host, port=args.port, api_key=key, cors_origins=tuple(args.cors_origin),
        idle_ttl_s=None if args.ttl < 0 else args.ttl, max_queue=args.max_queue, n_ctx=args.ctx,
        n_parallel=args.parallel,
    )  # fmt: skip
    try:
        config.check()
    except AppError as exc:
        return fail_error(exc, OPTIONS)
    _log_to_stderr(args.log_level)
    try:
        return asyncio.run(_serve(config, folders, args.vllm_url))
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)
    except AppError as exc:
        return fail_error(exc, OPTIONS)


async def _serve(config: ServerConfig, folders: list[Path], vllm_url: str | None) -> int:
    from app.services.api.config import is_loopback
    from app.services.paths import app_paths
    from app.services.workstation import Workstation

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    how: list[int] = []

    def stopping(code: int) -> None:
        how.append(code)
        stop.set()

    loop.add_signal_handler(signal.SIGTERM, stopping, EXIT_OK)
    loop.add_signal_handler(signal.SIGINT, stopping, EXIT_INTERRUPTED)
    workstation = Workstation.create(app_paths().ensure())
    if workstation.settings_problem:
        print(f"llm-workstation: {workstation.settings_problem}", file=sys.stderr)
    try:
        await loop.run_in_executor(None, workstation.model_settings.load)
        if vllm_url:
            await _offer_vllm(workstation, vllm_url)
        api = workstation.api  # the window's server, with this command line's config and folders
        api.also_serve(folders)
        url = await api.start(config)
        print(url, flush=True)
        print(f"OpenAI clients: base_url {url}/v1 · Anthropic clients: base_url {url} · Ctrl-C or SIGTERM stops.",
              file=sys.stderr, flush=True)  # fmt: skip
        print(_context_line(config, workstation.settings.load.n_ctx), file=sys.stderr, flush=True)
        print(_parallel_line(config.n_parallel), file=sys.stderr, flush=True)
        if not is_loopback(config.host):
            print(f"Listening on {config.host}: other machines can reach this server; they must send the API key.",
                  file=sys.stderr, flush=True)  # fmt: skip
        await stop.wait()
    finally:
        await workstation.close()  # the server stops, replies in flight end, models unload, the engines close
    return how[0] if how else EXIT_OK


def _context_size(text: str) -> int:
    """``--ctx``: a whole number of tokens (the range is ServerConfig's to check, with the other settings)."""
    try:
        return int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"the context size is a whole number of tokens, e.g. 32768, not {text!r}"
        ) from None


def _parallel(text: str) -> int:
    """``--parallel``: a whole number of requests, or ``auto`` (0: what fits)."""
    if text.strip().lower() == "auto":
        return 0
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"give a number of requests, e.g. 4, or auto; not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1 request at a time (1: one at a time), not {value}")
    return value


def _parallel_line(n_parallel: int | None) -> str:
    if n_parallel is None:
        return ("llama.cpp: each model's Parallel sequences setting, else as many requests at once as fit by the "
                "memory estimate, up to 4 (--parallel 1: one at a time).")  # fmt: skip
    if n_parallel == 0:
        return "llama.cpp: as many requests at once per model as fit by the memory estimate, up to 4 (--parallel auto)."
    return f"llama.cpp: up to {n_parallel} requests at once per model, each with its full context (--parallel)."


def _context_line(config: ServerConfig, default_ctx: int) -> str:
    if config.n_ctx is not None:
        start = f"Context: every model loads with {config.n_ctx:,} tokens (--ctx)"
    else:
        start = f"Context: each model loads with its own setting (default {default_ctx:,} tokens; --ctx sets one)"
    return (
        f"{start}; a request that needs more reloads its model with a larger context when memory allows, up to the "
        "model's trained context. Each load is logged with its context."
    )


async def _offer_vllm(workstation: Workstation, url: str) -> None:
    """Serve the model of the vLLM server at ``url`` (it must serve one)."""
    from app.backends.vllm import VllmBackend
    from app.core.params import LoadParams
    from app.services.engines.events import VllmEndpoint

    key = os.environ.get(VLLM_KEY_ENV) or None
    probe = VllmBackend(url, key)
    try:
        info = await probe.load("", LoadParams())
    finally:
        await probe.close()
    workstation.host.offer_vllm(VllmEndpoint(probe.base_url, info.name, key, "remote"))


def _log_to_stderr(level: str) -> None:
    from app.services.logbuffer import APP_LOGGER, RedactingFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger(APP_LOGGER)
    logger.addHandler(handler)
    logger.setLevel(level)


def run_bench(args: argparse.Namespace) -> int:
    import json

    from app.core.params import LoadParams
    from app.devtools import chat_bench, serve_bench

    threads = args.threads or max((os.cpu_count() or 2) // 2, 1)
    load = LoadParams(n_ctx=args.ctx, chat_format=args.chat_format or None, n_threads=threads)
    try:
        model = Path(args.model) if args.model else serve_bench.starter_model()
    except AppError as exc:
        return fail_error(exc)
    if not model.is_file():
        return fail(f"{model} is not a file. Pass a GGUF with --model.", EXIT_BAD_INPUT)
    if args.concurrency is not None:
        return _run_concurrency_bench(args, model, load)
    baseline = not args.no_baseline_server
    if baseline and (missing := serve_bench.llama_cpp_server_missing()):
        return fail(f"{missing}; or pass --no-baseline-server.", EXIT_BAD_INPUT)
    no_repack = args.no_repack or chat_bench.repacking_off_here()
    try:
        report = serve_bench.bench_serve(
            model, load, max_tokens=args.max_tokens, runs=args.runs, baseline=baseline, no_repack=no_repack,
            vllm_url=args.vllm_url, vllm_requests=args.vllm_requests,
        )  # fmt: skip
    except (RuntimeError, OSError) as exc:  # a server that did not start: its output is in the message
        return fail(str(exc))
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)
    print(json.dumps(report, indent=2) if args.json else "\n".join(serve_bench.report_lines(report)))
    return EXIT_OK


def _run_concurrency_bench(args: argparse.Namespace, model: Path, load: LoadParams) -> int:
    import json

    from app.devtools import chat_bench, concurrency_bench

    if args.concurrency < 1 or args.rounds < 1 or args.repeats < 1:
        return fail("--concurrency, --rounds and --repeats must be at least 1.", EXIT_BAD_INPUT)
    no_repack = args.no_repack or chat_bench.repacking_off_here()
    try:
        report = concurrency_bench.bench_concurrency(
            model, load, slots=args.concurrency, max_tokens=args.max_tokens, rounds=args.rounds,
            no_repack=no_repack, repeats=args.repeats,
        )  # fmt: skip
    except (RuntimeError, OSError) as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)
    print(json.dumps(report, indent=2) if args.json else "\n".join(concurrency_bench.report_lines(report)))
    return EXIT_OK
