"""Every verb maps an error's kind to the documented exit code (``app.cli.common``) and adds the option that
fixes it: the service raises a neutral message with a ``setting``; the verb prints it on one line with the flag.

Each case makes the service call a verb relies on raise an error of one kind, runs the real verb in-process and
reads its exit code and its one stderr line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

import pytest

from app.cli import main
from app.cli.common import EXIT_BAD_INPUT, EXIT_CODES, EXIT_FAILED, exit_code, fail_error, with_hint
from app.core.errors import AppError, ErrorKind, InvalidInputError

KINDS = list(ErrorKind)


def _raiser(error: BaseException) -> Callable[..., object]:
    def raise_it(*_args: object, **_kwargs: object) -> object:
        raise error

    return raise_it


def _async_raiser(error: BaseException) -> Callable[..., object]:
    async def raise_it(*_args: object, **_kwargs: object) -> object:
        raise error

    return raise_it


# --- the mapping itself ---------------------------------------------------------------------------------------


def test_every_kind_has_its_documented_exit_code():
    assert dict(EXIT_CODES) == {
        ErrorKind.INVALID_INPUT: EXIT_BAD_INPUT,
        ErrorKind.NOT_FOUND: EXIT_BAD_INPUT,
        ErrorKind.BUSY: EXIT_FAILED,
        ErrorKind.UNAVAILABLE: EXIT_FAILED,
        ErrorKind.ENGINE_FAILED: EXIT_FAILED,
    }
    assert exit_code(InvalidInputError("x")) == 2  # a class's kind
    assert exit_code(AppError("x", kind=ErrorKind.NOT_FOUND)) == 2  # an instance's kind
    assert exit_code(ValueError("x")) == 2 and exit_code(OSError("x")) == 1  # not ours: a bad value, or a failure
    assert exit_code(AppError("x", kind=ErrorKind.NOT_FOUND), {ErrorKind.NOT_FOUND: 1}) == 1  # a verb's exception


def test_the_hint_goes_before_the_full_stop_and_the_message_stays_on_one_line(capsys):
    assert with_hint("Choose another folder.", "--prefix DIR") == "Choose another folder (--prefix DIR)."
    assert with_hint("check the API key", "--api-key") == "check the API key (--api-key)"
    assert with_hint("two\nlines", None) == "two lines"
    code = fail_error(AppError("cannot reach the server; check the address", kind=ErrorKind.UNAVAILABLE,
                               setting="endpoint"))  # fmt: skip
    assert code == 1
    assert capsys.readouterr().err == "llm-workstation: cannot reach the server; check the address (--endpoint)\n"
    fail_error(AppError("no such run", kind=ErrorKind.NOT_FOUND, setting="not-a-known-setting"))
    assert capsys.readouterr().err == "llm-workstation: no such run\n"  # no hint invented


# --- each verb ------------------------------------------------------------------------------------------------


def _batch_input(tmp_path: Path) -> str:
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "a", "prompt": "hi"}\n')
    return str(source)


def _ollama_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.services.ollama.client import OllamaService, OllamaStatus

    async def running(self: OllamaService) -> OllamaStatus:
        return OllamaStatus(True, self.host, version="0.9.0")

    monkeypatch.setattr(OllamaService, "status", running)


class Case(NamedTuple):
    make: Callable[[ErrorKind], BaseException]  # the error of a kind the service raises
    target: str  # the service function that raises it
    is_async: bool
    argv: list[str]
    hint: str | None  # the option the verb adds to the message
    exceptions: Mapping[ErrorKind, int] | None = None  # the verb's documented exceptions to ``EXIT_CODES``


# A Hub error's kind follows from its reason.
HUB_REASONS = {
    ErrorKind.INVALID_INPUT: "bad_input",
    ErrorKind.NOT_FOUND: "not_found",
    ErrorKind.BUSY: "busy",
    ErrorKind.UNAVAILABLE: "network",
    ErrorKind.ENGINE_FAILED: "failed",
}


def _cases(tmp_path: Path) -> dict[str, Case]:
    from app.backends.protocol import BackendError
    from app.core.gguf.header import GgufFileError
    from app.core.settings import SettingsError
    from app.core.user_files import UserFileError
    from app.services.batch.runner import BatchError
    from app.services.bench.engines import BenchRunError
    from app.services.bench.store import BenchStoreError
    from app.services.desktop_install import DesktopInstallError
    from app.services.downloads.hub import HubError
    from app.services.ollama.client import OllamaError
    from app.services.starter_model import StarterModelError

    model = str(tmp_path / "m.gguf")
    batch = ["batch", _batch_input(tmp_path), "--endpoint", "http://127.0.0.1:9", "-o", str(tmp_path / "out")]
    desktop = ["install-desktop", "--prefix", str(tmp_path), "--exec", sys.executable, "--no-refresh"]
    return {
        "chat": Case(
            lambda k: GgufFileError("not a GGUF", kind=k), "app.cli.chat.read_gguf_header", False,
            ["chat", model, "-p", "hi"], None,
        ),
        "bench chat": Case(
            lambda k: BackendError("the worker failed", kind=k), "app.devtools.chat_bench.bench_chat", True,
            ["bench", "chat", model], None,
        ),
        "inspect": Case(
            lambda k: GgufFileError("not a GGUF", kind=k), "app.cli.inspect.read_gguf_header", False,
            ["inspect", model], None,
        ),
        "models": Case(
            lambda k: SettingsError("the settings file is damaged", kind=k), "app.cli.models.load_settings", False,
            ["models"], None,
        ),
        "modelfile": Case(
            lambda k: UserFileError("the Modelfile is a FIFO", kind=k), "app.cli.modelfile.read_modelfile", False,
            ["modelfile", "check", "Modelfile"], None,
        ),
        "hub": Case(
            lambda k: HubError("the Hub failed", reason=HUB_REASONS[k], setting="files"),
            "app.services.downloads.hub.HubService.repo_detail", False, ["hub", "files", "org/repo"],
            "`llm-workstation hub files org/repo` lists them",
        ),
        "batch": Case(
            lambda k: BatchError("the server refused the API key; check the API key", kind=k, setting="api_key"),
            "app.services.batch.runner.BatchRunner.run", True, batch, "--api-key or $LLMW_API_KEY",
        ),
        "bench run": Case(
            lambda k: BenchRunError("the model is not served; choose one of those", kind=k, setting="model"),
            "app.services.bench.run.run_bench", True,
            ["bench", "run", "--backend", "vllm", "--endpoint", "http://127.0.0.1:9"], "--model",
        ),
        "bench runs": Case(
            lambda k: BenchStoreError("no saved bench run 'a'", kind=k, setting="run_id"),
            "app.services.bench.store.BenchStore.compare", False, ["bench", "runs", "--compare", "a", "b"],
            "`llm-workstation bench runs` lists them",
        ),
        "install-desktop": Case(
            lambda k: DesktopInstallError("name the program to start.", kind=k, setting="exec"),
            "app.cli.desktop.install", False, desktop, "--exec PATH",
        ),
        "ollama": Case(
            lambda k: OllamaError("Ollama has no model named 'x'.", kind=k),
            "app.services.ollama.client.OllamaService.list_models", True,
            ["ollama", "--host", "http://127.0.0.1:9", "list"], None,
            {ErrorKind.NOT_FOUND: EXIT_FAILED},  # as Ollama's own command: a model it lacks is a failure
        ),
        "starter-model": Case(
            lambda k: StarterModelError("Cannot create the folder. Choose another folder.", kind=k,
                                        setting="models_dir"),
            "app.services.starter_model.ensure_starter_model", False,
            ["starter-model", "--dir", str(tmp_path / "models")], "--dir",
        ),
    }  # fmt: skip


VERBS = [
    "chat",
    "bench chat",
    "inspect",
    "models",
    "modelfile",
    "hub",
    "batch",
    "bench run",
    "bench runs",
    "install-desktop",
    "ollama",
    "starter-model",
]


@pytest.mark.parametrize("kind", KINDS, ids=[k.value for k in KINDS])
@pytest.mark.parametrize("verb", VERBS)
def test_each_verb_exits_with_the_code_of_the_error_kind(verb, kind, tmp_path, monkeypatch, capsys):
    case = _cases(tmp_path)[verb]
    error = case.make(kind)
    if verb == "bench chat":  # the header is read first; the benchmark itself fails
        monkeypatch.setattr("app.cli.chat.read_gguf_header", lambda _path: None)
    if verb == "ollama":
        _ollama_answers(monkeypatch)
    monkeypatch.setattr(case.target, (_async_raiser if case.is_async else _raiser)(error))
    code = main(case.argv)
    err = capsys.readouterr().err
    assert code == (case.exceptions or {}).get(kind, EXIT_CODES[kind]), err
    assert err.startswith("llm-workstation: ") and err.count("\n") == 1 and "Traceback" not in err
    assert str(error).rstrip(".") in err
    if case.hint is not None:
        assert f"({case.hint})" in err
