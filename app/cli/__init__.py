"""The command line: ``llm-workstation <verb>``; with no verb it opens the window."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app import __version__
from app.ui.lifecycle import QUIT


def build_parser(with_verbs: bool = True) -> argparse.ArgumentParser:
    """The whole command line; without ``with_verbs`` only the window's options (the verbs' modules cost ~170 ms
    of imports that opening the window does not need)."""
    parser = argparse.ArgumentParser(
        prog="llm-workstation",
        description="Run large language models on this machine: chat, serve, monitor.",
        add_help=with_verbs,
    )
    parser.add_argument("--version", action="version", version=f"llm-workstation {__version__}")
    parser.add_argument("--screenshot", metavar="FILE", help="render the window offscreen to a PNG and exit")
    parser.add_argument("--size", metavar="WxH", default="1366x768", help="with --screenshot: the window size")
    parser.add_argument("--page", default="chat", help="with --screenshot: the page, e.g. chat, models/discover")
    parser.add_argument("--palette", choices=("light", "dark"), default=None, help="with --screenshot: the palette")
    parser.add_argument("--model", default=None, help="with --screenshot: load this model (a .gguf) first")
    parser.add_argument("--prompt", default=None, help="with --screenshot --model: send this and wait for the reply")
    parser.add_argument("--smoke", action="store_true", help="build the window, process events, exit 0")
    if not with_verbs:
        return parser
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    _add_chat(verbs)
    _add_bench(verbs)
    _add_starter(verbs)
    for module in _verb_modules():
        module.add_parser(verbs)
    return parser


# Modules that add verbs: each has ``VERBS`` (the verb names it handles), ``add_parser(verbs)`` and
# ``run(args) -> int``; one with ``BENCH_KINDS`` also has ``add_bench_parser(kinds)`` and ``run_bench(args)``.
VERB_MODULES = (
    "batch",
    "modelfile",
    "ollama",
    "desktop",
    "models",
    "bench",
    "inspect",
    "monitor",
    "hub",
    "render",
    "history",
    "serve",
    "chats",
    "mcp",
    "launch",
    "docs",
)


def _verb_modules() -> list:
    import importlib

    return [importlib.import_module(f"app.cli.{name}") for name in VERB_MODULES]


def _add_chat(verbs: argparse._SubParsersAction) -> None:
    chat = verbs.add_parser("chat", help="chat with a GGUF model through the llama.cpp worker")
    chat.add_argument("model", help="path to a .gguf file")
    chat.add_argument("-p", "--prompt", required=True, help="the user message")
    chat.add_argument("--system", default="", help="a system prompt")
    chat.add_argument("--max-tokens", type=int, default=256)
    chat.add_argument("--temperature", type=float, default=0.7)
    chat.add_argument("--seed", type=int, default=None)
    chat.add_argument("--ctx", type=int, default=4096, help="context size in tokens (n_ctx)")
    chat.add_argument("--chat-format", default=None, help="override the chat format (e.g. gemma, chatml, llama-3)")
    chat.add_argument("--gpu-layers", type=int, default=None, help="layers to offload (default: all when possible)")
    chat.add_argument(
        "--spec",
        default="off",
        metavar="off|ngram|draft:PATH",
        help="speculative decoding: n-gram lookup in the text so far, or a draft model with the same tokenizer",
    )
    chat.add_argument("--json", action="store_true", help="print the reply's figures as JSON on the last line")
    chat.add_argument(
        "--docs", default=None, metavar="NAME",
        help="answer from your documents: a collection's name, or a file or folder (indexed first if need be)",
    )  # fmt: skip


def _add_bench(verbs: argparse._SubParsersAction) -> None:
    bench = verbs.add_parser("bench", help="benchmarks")
    kinds = bench.add_subparsers(dest="bench_kind", metavar="KIND", required=True)
    chat = kinds.add_parser("chat", help="decode tok/s and TTFT: the app's worker path against raw llama-cpp-python")
    chat.add_argument("model", help="path to a .gguf file")
    chat.add_argument("--ctx", type=int, default=2048)
    chat.add_argument("--max-tokens", type=int, default=128)
    chat.add_argument("--runs", type=int, default=5, help="measured repetitions per path (after one warm-up)")
    chat.add_argument(
        "--turns", type=int, default=None, help="multi-turn prefix reuse: TTFT of each turn of a chat, app and raw"
    )
    chat.add_argument("--chat-format", default=None)
    chat.add_argument("--threads", type=int, default=None)
    chat.add_argument("--json", action="store_true")
    start = kinds.add_parser("startup", help="cold start to main window shown, and idle memory")
    start.add_argument("--runs", type=int, default=5)
    start.add_argument("--json", action="store_true")
    for module in _verb_modules():
        if hasattr(module, "BENCH_KINDS"):
            module.add_bench_parser(kinds)


def _add_starter(verbs: argparse._SubParsersAction) -> None:
    starter = verbs.add_parser("starter-model", help="write the starter model (Gemma 3 270M) into the models folder")
    starter.add_argument("--dir", default=None, help="target folder (default: the app's models folder)")


def main(argv: Sequence[str] | None = None) -> int:
    QUIT.catch()  # the console script's first line (python -m app caught them earlier): held for the window
    args = _parse(sys.argv[1:] if argv is None else list(argv))
    if args.verb is not None:
        QUIT.release()  # a verb handles signals as any command does
    from app.services.paths import secure_app_files

    secure_app_files()  # what earlier versions left readable by others becomes owner-only (window and CLI)
    if args.verb is None:
        return _run_gui(args)
    for module in _verb_modules():
        if args.verb == "bench" and args.bench_kind in getattr(module, "BENCH_KINDS", ()):
            return int(module.run_bench(args))
        if args.verb in getattr(module, "VERBS", ()):
            return int(module.run(args))
    from app.cli import chat as commands

    return commands.run(args)


def _parse(argv: list[str]) -> argparse.Namespace:
    """The window's options alone when that is all there is; otherwise the whole command line."""
    window_args, rest = build_parser(with_verbs=False).parse_known_args(argv)
    if not rest:
        window_args.verb = None
        return window_args
    return build_parser().parse_args(argv)


def _run_gui(args: argparse.Namespace) -> int:
    """The window, or one offscreen screenshot of it; bad screenshot options exit 2 before Qt starts."""
    from app.cli.common import EXIT_BAD_INPUT, fail
    from app.ui.page_paths import PAGE_PATHS  # Qt-free

    shot = None
    if args.screenshot:
        size = _size(args.size)
        if size is None:
            return fail(f"--size {args.size!r} is not WIDTHxHEIGHT (e.g. 1366x768)", EXIT_BAD_INPUT)
        if args.page not in PAGE_PATHS:
            return fail(f"unknown page {args.page!r}; pages: {', '.join(PAGE_PATHS)}", EXIT_BAD_INPUT)
        from app.ui.app import Screenshot

        shot = Screenshot(args.screenshot, size, args.page, args.palette, args.model, args.prompt)
    from app.ui.app import run_gui

    return run_gui(screenshot=shot, smoke=args.smoke)


def _size(text: str) -> tuple[int, int] | None:
    width, _, height = text.lower().partition("x")
    if not (width.isdigit() and height.isdigit()) or not (200 <= int(width) <= 8000 and 200 <= int(height) <= 8000):
        return None
    return int(width), int(height)


if __name__ == "__main__":
    sys.exit(main())
