"""``llm-workstation ollama list|ps|pull|rm|create`` against FakeOllama (real HTTP through the official client).

Most tests run the verb in-process (the parser ``app.cli.ollama.add_parser`` builds, then ``run``); the
subprocess tests at the end go through ``python -m app`` and run once ``app/cli/__init__.py`` knows the verb.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import subprocess
import sys

import pytest

from app.cli import ollama as commands_ollama
from tests.support.fake_ollama import FakeOllama


@pytest.fixture
def fake():
    with FakeOllama() as server:
        yield server


def ollama(capsys, *argv: str) -> tuple[int, str, str]:
    """Run ``llm-workstation ollama ARGV`` in-process: (exit code, stdout, stderr)."""
    parser = argparse.ArgumentParser(prog="llm-workstation")
    commands_ollama.add_parser(parser.add_subparsers(dest="verb"))
    code = commands_ollama.run(parser.parse_args(["ollama", *argv]))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_json_and_text(capsys, fake):
    fake.add_model("llama3.2", size=2_019_393_189, parameter_size="3.2B")
    fake.add_model("qwen3:4b", size=2_500_000_000, family="qwen3", quantization_level="Q8_0")
    code, out, err = ollama(capsys, "--host", fake.host, "list", "--json")
    assert code == 0 and err == ""
    models = {m["name"]: m for m in json.loads(out)}
    assert set(models) == {"llama3.2:latest", "qwen3:4b"}
    assert models["qwen3:4b"]["size"] == 2_500_000_000 and models["qwen3:4b"]["family"] == "qwen3"
    assert models["llama3.2:latest"]["parameter_size"] == "3.2B"
    code, out, _ = ollama(capsys, "list", "--host", fake.host)  # --host after the action works too
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["NAME", "ID", "SIZE", "PARAMETERS", "QUANTIZATION", "MODIFIED"]
    row = next(line for line in lines if line.startswith("llama3.2:latest"))
    assert "1.9 GiB" in row and "3.2B" in row and "ago" in row


def test_ps_json_and_text(capsys, fake):
    fake.add_model("llama3.2", size=2_000_000_000)
    fake.vram_fraction = 0.5
    fake.load("llama3.2", num_ctx=8192)
    code, out, _ = ollama(capsys, "--host", fake.host, "ps", "--json")
    assert code == 0
    (model,) = json.loads(out)
    size = 2_000_000_000 + 8192 * 1024
    assert model["name"] == "llama3.2:latest" and model["size"] == size
    assert model["size_vram"] == size // 2 and model["vram_fraction"] == 0.5 and model["context_length"] == 8192
    code, out, _ = ollama(capsys, "--host", fake.host, "ps")
    assert code == 0 and "50%/50% CPU/GPU" in out and "8192" in out and re.search(r"\bin [45] minutes\b", out)


def test_not_running_is_one_calm_line(capsys):
    host = FakeOllama.unused_host()
    for action in (["list"], ["ps", "--json"], ["pull", "x"], ["rm", "x"]):
        code, out, err = ollama(capsys, "--host", host, *action)
        assert (code, out) == (1, "")
        assert err == f"llm-workstation: Ollama is not running at {host}: start it with `ollama serve`.\n"


def test_unusable_host_is_bad_input(capsys):
    code, _, err = ollama(capsys, "--host", "ftp://example", "list")
    assert code == 2 and err.startswith("llm-workstation: The Ollama host 'ftp://example' must start with http")
    assert err.count("\n") == 1


def test_pull_succeeds_with_progress(capsys, fake):
    fake.add_remote("qwen3:4b", [3_000_000, 1_000])
    code, out, err = ollama(capsys, "--host", fake.host, "pull", "qwen3:4b")
    assert code == 0 and out == ""
    lines = err.splitlines()  # not a terminal: one line per step
    assert lines[0] == "pulling manifest" and lines[-1] == "success"
    assert len([line for line in lines if line.startswith("pulling ")]) == 3  # manifest, then one per layer
    assert fake.model("qwen3:4b") is not None


@pytest.mark.parametrize(
    ("name", "fault", "reason"),
    [
        ("no-such-model", None, "Ollama could not find no-such-model in its library"),
        ("qwen3:4b", {"error": "no space left on device"}, "no space left on device"),
        ("qwen3:4b", {"die": True}, "The connection to Ollama at"),
    ],
    ids=["unknown", "error-line", "server-died"],
)
def test_pull_failure_exits_1_with_one_line(capsys, fake, name, fault, reason):
    fake.add_remote("qwen3:4b", [3_000_000, 1_000])
    if fault:
        fake.fail("/api/pull", after=3, **fault)
    code, out, err = ollama(capsys, "--host", fake.host, "pull", name)
    assert code == 1 and out == ""
    failure = err.splitlines()[-1]
    assert failure.startswith("llm-workstation: ") and reason in failure
    assert "Traceback" not in err and fake.model(name) is None


def test_progress_rewrites_one_line_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    progress = commands_ollama.Progress(stream)
    progress.show("pulling manifest")
    progress.show("pulling abc", 0, 2_000_000_000)
    progress.show("pulling abc", 1_000_000_000, 2_000_000_000)
    progress.show("success")
    progress.end()
    assert stream.getvalue() == (
        "\rpulling manifest\n\rpulling abc   0% 0 B/1.9 GiB\rpulling abc  50% 953.7 MiB/1.9 GiB\n\rsuccess\n"
    )


def test_rm(capsys, fake):
    fake.add_model("llama3.2")
    fake.add_model("qwen3:4b")
    code, out, err = ollama(capsys, "--host", fake.host, "rm", "qwen3:4b")
    assert (code, out, err) == (0, "deleted 'qwen3:4b'\n", "")
    assert fake.model("qwen3:4b") is None and fake.model("llama3.2") is not None
    code, out, err = ollama(capsys, "--host", fake.host, "rm", "qwen3:4b")
    assert code == 1 and out == ""
    assert err == "llm-workstation: Ollama has no model named 'qwen3:4b'. Check the name or pull it first.\n"


def test_create_from_an_installed_model(capsys, fake, tmp_path):
    fake.add_model("llama3.2", system="base")
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text(
        'FROM llama3.2\nPARAMETER temperature 0.2\nPARAMETER stop "<|eot|>"\nSYSTEM """You are terse."""\n'
    )
    code, out, err = ollama(capsys, "--host", fake.host, "create", "terse", "-f", str(modelfile))
    assert code == 0 and out == "", err
    assert err.splitlines()[-1] == "success" and "writing manifest" in err
    (request,) = fake.requests_to("/api/create")
    assert request.json["from"] == "llama3.2" and request.json["system"] == "You are terse."
    assert request.json["parameters"] == {"temperature": 0.2, "stop": ["<|eot|>"]}
    created = fake.model("terse")
    assert created is not None and created.system == "You are terse." and created.parent_model == "llama3.2:latest"


def test_create_parse_error_exits_2_with_ollamas_text(capsys, tmp_path):
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text("FROM x\nBADCMD y\n")
    host = FakeOllama.unused_host()  # the Modelfile is read before Ollama is asked anything
    code, out, err = ollama(capsys, "--host", host, "create", "bad", "-f", str(modelfile))
    assert code == 2 and out == ""
    assert err.startswith('(line 2): command must be one of "from", "license", "template", "system", "adapter",')
    assert err.count("\n") == 1


def test_create_with_bad_input_or_failing_ollama(capsys, fake, tmp_path):
    missing = tmp_path / "Modelfile"
    code, _, err = ollama(capsys, "--host", fake.host, "create", "x", "-f", str(missing))
    assert code == 2 and err.startswith(f"llm-workstation: cannot read {missing}: ")
    missing.write_text("FROM ./weights.gguf\n")
    code, _, err = ollama(capsys, "--host", fake.host, "create", "x", "-f", str(missing))
    assert code == 2 and "./weights.gguf" in err and "does not exist" in err
    missing.write_text("FROM no-such-base\n")
    code, _, err = ollama(capsys, "--host", fake.host, "create", "x", "-f", str(missing))
    assert code == 1 and err.splitlines()[-1].endswith("pull model manifest: file does not exist")
    assert fake.model("x") is None and "Traceback" not in err


# --- through `python -m app`, once app/cli/__init__.py knows the verb ------------------------------------------------
def _wired() -> bool:
    from app.cli import build_parser

    with contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit):
        return build_parser().parse_args(["ollama", "list"]).verb == "ollama"
    return False


needs_wiring = pytest.mark.skipif(not _wired(), reason="app/cli/__init__.py does not dispatch the ollama verb yet")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=60, check=False)


@needs_wiring
def test_subprocess_list_and_failed_pull(fake):
    fake.add_model("llama3.2")
    result = cli("ollama", "--host", fake.host, "list", "--json")
    assert result.returncode == 0, result.stderr
    assert [m["name"] for m in json.loads(result.stdout)] == ["llama3.2:latest"]
    result = cli("ollama", "pull", "nope", "--host", fake.host)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith("llm-workstation: Ollama could not find nope")
