"""Service, backend and core messages are neutral: they name no option of our command line, no verb of it and no
widget. The CLI adds its option hints (``app.cli.common``), a page names its own fields; the same message reads
right in the window, in a terminal and, later, in an API answer.

The check reads every string literal (docstrings aside) under ``app/services``, ``app/backends`` and ``app/core``.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from pathlib import Path

from app.cli import build_parser

APP = Path(__file__).resolve().parents[1] / "app"
LAYERS = ("services", "backends", "core")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
ARGV_WORD = re.compile(r"--[a-z0-9-]+(=\S*)?")  # a literal that is one command-line word builds a command line
# vLLM's own launch flags: domain facts a message may name ("start vLLM with --scheduling-policy priority").
VLLM_FLAGS = frozenset(
    {
        "--chat-template",
        "--cpu-offload-gb",
        "--enable-auto-tool-choice",
        "--enable-lora",
        "--lora-modules",
        "--max-model-len",
        "--max-num-batched-tokens",
        "--scheduling-policy",
        "--speculative-config",
        "--tokenizer",
        "--tool-call-parser",
    }
)
# Names of widgets, menus and keys: a page says where its own controls are.
WIDGET = re.compile(
    r"\bpress [A-Z]\w*|\bclick\b|→|\((?:Esc|Ctrl\+\w+)\)"  # a button, a menu path, a key
    r"|\bthe [\w.-]*[A-Z][\w. -]*? (?:page|tab|button|field|checkbox)\b"  # "the vLLM page", "the API key field"
)


def _literals(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of each string literal in ``path`` that is not a docstring; f-strings give their parts."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def _sources() -> Iterator[tuple[str, int, str]]:
    for layer in LAYERS:
        for path in sorted((APP / layer).rglob("*.py")):
            for line, text in _literals(path):
                yield str(path.relative_to(APP)), line, text


def _verbs() -> set[str]:
    """Our command line's verbs (``ollama``'s are Ollama's own command's too, so a message may name those)."""
    (verbs,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(verbs.choices) - {"ollama"}


def test_no_message_names_an_option_of_our_command_line():
    found = []
    for where, line, text in _sources():
        if ARGV_WORD.fullmatch(text) or "vllm serve" in text:  # a command line's word, or one to copy
            continue
        found += [f"{where}:{line}: {flag} in {text!r}" for flag in FLAG.findall(text) if flag not in VLLM_FLAGS]
    assert not found, "say it in words and let the CLI add the option (app.cli.common):\n" + "\n".join(found)


def test_no_message_names_a_verb_of_our_command_line():
    verb = re.compile(r"`(?:llm-workstation )?(?:" + "|".join(map(re.escape, sorted(_verbs()))) + r")\b")
    found = [f"{where}:{line}: {text!r}" for where, line, text in _sources() if verb.search(text)]
    assert not found, "the CLI adds where to look (app.cli.common.OPTION_HINTS):\n" + "\n".join(found)


def test_no_message_names_a_widget():
    found = []
    for where, line, text in _sources():
        found += [f"{where}:{line}: {match.group()!r} in {text!r}" for match in WIDGET.finditer(text)]
    assert not found, "a page names its own controls:\n" + "\n".join(found)


# Exceptions that never reach a user as they are: each is turned into an AppError (or a result) where it is caught.
INTERNAL_ERRORS = frozenset(
    {
        "backends/openai_stream.py:HttpError",  # the vLLM backend turns it into a GenerationError
        "backends/openai_stream.py:StreamError",
        "backends/llamacpp/engine.py:EngineError",  # inside the worker process; its kind crosses as a string
        "core/modelfile/go_template/errors.py:FuncError",  # becomes a TemplateError
        "core/modelfile/go_template/lexer.py:_LexError",
        "core/chat/tool_formats.py:CallFormatError",  # the reply parser turns it into a ToolCallError event
    }
)


def test_every_error_a_user_can_see_is_an_app_error():
    """One vocabulary: each ``…Error`` class in these layers carries a kind (``AppError``)."""
    import importlib

    from app.core.errors import AppError

    outside = []
    for layer in LAYERS:
        for path in sorted((APP / layer).rglob("*.py")):
            where = str(path.relative_to(APP))
            names = [
                node.name
                for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(node, ast.ClassDef) and node.name.endswith("Error")
            ]
            if not names:
                continue
            module = importlib.import_module("app." + where.removesuffix(".py").replace("/", "."))
            outside += [
                f"{where}:{name}"
                for name in names
                if issubclass(getattr(module, name), BaseException)  # an event class may be named …Error too
                and not issubclass(getattr(module, name), AppError)
                and f"{where}:{name}" not in INTERNAL_ERRORS
            ]
    assert not outside, "derive these from app.core.errors.AppError (with their kind):\n" + "\n".join(outside)


def test_the_checks_catch_what_they_are_for():
    """The patterns find the wordings this issue removed (so a green run means something)."""
    assert FLAG.findall("refused the API key (HTTP 401); check --api-key") == ["--api-key"]
    assert WIDGET.search("The file was not placed: press Retry to download it again.")
    assert WIDGET.search("start it on the vLLM page or check the address")
    assert WIDGET.search("load the model with a larger context (Settings → Loading).")
    assert WIDGET.search("Put the API key in the API key field, not in the extra arguments.")
    assert not WIDGET.search("accept its license on its Hub page")
    assert not WIDGET.search("the quoted field that opens here is never closed")
    assert {"hub", "bench", "download", "batch"} <= _verbs()
