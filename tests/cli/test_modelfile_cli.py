"""``llm-workstation modelfile parse|check|fmt`` and the shipped presets."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The shipped presets: package data, edited in app/resources/modelfiles/.
PRESETS = sorted((Path(__file__).resolve().parents[2] / "app" / "resources" / "modelfiles").glob("*.Modelfile"))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=60, check=False)


def test_parse_json_lists_instructions_in_order(tmp_path):
    path = tmp_path / "Modelfile"
    path.write_text(
        'FROM llama3.2\nPARAMETER temperature 0.7\nPARAMETER stop "<|eot|>"\nMESSAGE user """Hi\nthere"""\n'
    )
    result = cli("modelfile", "parse", str(path), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {"instruction": "FROM", "value": "llama3.2"},
        {"instruction": "PARAMETER", "name": "temperature", "value": "0.7"},
        {"instruction": "PARAMETER", "name": "stop", "value": "<|eot|>"},
        {"instruction": "MESSAGE", "role": "user", "value": "Hi\nthere"},
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "FROM x\nBADCMD y\n",
            '(line 2): command must be one of "from", "license", "template", "system", "adapter", '
            '"draft", "renderer", "parser", "parameter", "message", or "requires"',
        ),
        ("PARAMETER temperature 1\n", "no FROM line"),
        ("FROM x\nMESSAGE bot hi\n", '(line 2): message role must be one of "system", "user", or "assistant"'),
        ("FROM x\r\nBADCMD y\r\n", "(line 3): command must be one of"),
    ],
)
def test_parse_errors_exit_2_with_ollamas_text(tmp_path, text, error):
    path = tmp_path / "Modelfile"
    path.write_bytes(text.encode())
    result = cli("modelfile", "parse", str(path), "--json")
    assert result.returncode == 2
    assert result.stderr.strip().startswith(error) and result.stdout == ""


def test_check_reports_type_errors(tmp_path):
    path = tmp_path / "Modelfile"
    path.write_text("FROM x\nPARAMETER num_ctx lots\nPARAMETER use_mlock true\n")
    result = cli("modelfile", "check", str(path))
    assert result.returncode == 2
    assert "invalid int value [lots]" in result.stderr
    assert "warning: parameter use_mlock is deprecated" in result.stderr


def test_missing_file(tmp_path):
    result = cli("modelfile", "parse", str(tmp_path / "nope"))
    assert result.returncode == 2 and "cannot read" in result.stderr


def test_fmt_round_trips(tmp_path):
    path = tmp_path / "Modelfile"
    path.write_text('from   x  \n# comment\nsystem """  padded  """\nparameter stop a\nparameter stop b\n')
    result = cli("modelfile", "fmt", str(path))
    assert result.returncode == 0
    again = tmp_path / "again"
    again.write_text(result.stdout)
    first = cli("modelfile", "parse", str(path), "--json").stdout
    assert cli("modelfile", "parse", str(again), "--json").stdout == first


def test_at_least_five_presets_ship():
    from app.services.presets import shipped_presets_dir

    assert len(PRESETS) >= 5
    assert sorted(shipped_presets_dir().glob("*.Modelfile")) == PRESETS  # the folder the Modelfile page lists


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_every_preset_parses_and_checks_clean(preset):
    from app.core.modelfile.params import check_modelfile
    from app.core.modelfile.parser import parse_modelfile

    modelfile = parse_modelfile(preset.read_bytes())
    result = check_modelfile(modelfile)
    assert result.problems == [] and result.warnings == []
    assert modelfile.froms() and modelfile.format()


def test_coding_preset_is_what_the_issue_asks():
    from app.core.modelfile.params import check_modelfile
    from app.core.modelfile.parser import parse_modelfile

    modelfile = parse_modelfile((PRESETS[0].parent / "coding-assistant.Modelfile").read_bytes())
    typed = check_modelfile(modelfile).parameters
    assert typed["num_ctx"] == 32768
    assert typed["temperature"] == pytest.approx(0.2) and typed["top_p"] == pytest.approx(0.9)
    assert modelfile.system and "engineer" in modelfile.system


# --- hostile files: refused at once, never read without bound ------------------------------------------------------
def cli_within(seconds: float, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess that must finish in ``seconds`` (a hang fails the test instead of the suite)."""
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=seconds, check=False
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
@pytest.mark.parametrize("action", ["parse", "check", "fmt"])
def test_a_fifo_is_refused_at_once_with_exit_2(tmp_path, action):
    fifo = tmp_path / "Modelfile"
    os.mkfifo(fifo)
    result = cli_within(60, "modelfile", action, str(fifo))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == (
        f"llm-workstation: the Modelfile {fifo} is not a regular file (a pipe or a device); "
        "give the path of a regular file"
    )


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_fmt_of_a_link_to_dev_zero_is_refused_at_once(tmp_path):
    link = tmp_path / "Modelfile"
    link.symlink_to("/dev/zero")
    result = cli_within(60, "modelfile", "fmt", str(link))
    assert result.returncode == 2 and "is not a regular file (a pipe or a device)" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_50_mb_single_line_modelfile_is_refused_by_its_size(tmp_path):
    from app.cli import modelfile as commands_modelfile

    path = tmp_path / "Modelfile"
    path.write_bytes(b"FROM x\nSYSTEM " + b"y" * 50_000_000)
    args = argparse.Namespace(file=str(path), modelfile_action="fmt")
    assert commands_modelfile.run(args) == 2
    result = cli_within(60, "modelfile", "fmt", str(path))
    assert result.returncode == 2 and result.stdout == ""
    assert f"the Modelfile {path} is larger than 1 MiB (47.7 MiB)" in result.stderr


def test_a_modelfile_at_the_size_limit_is_read_and_formatted(tmp_path):
    from app.core.modelfile.parser import MAX_MODELFILE_BYTES

    head = b'FROM x\nLICENSE """'
    path = tmp_path / "Modelfile"
    path.write_bytes(head + b"a licence line\n" * ((MAX_MODELFILE_BYTES - len(head) - 4) // 15) + b'"""\n')
    assert path.stat().st_size <= MAX_MODELFILE_BYTES
    result = cli_within(60, "modelfile", "fmt", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('FROM x\nLICENSE "a licence line\na licence line\n')


def test_bench_modelfile_reports_each_shape_with_its_linearity():
    result = cli("bench", "modelfile", "--size", "32768", "--runs", "1", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    shapes = {row["shape"] for row in report["rows"]}
    assert {"blank-lines-in-a-quote", "many-parameters", "one-long-line"} <= shapes and report["scale"] == 16
    assert all(row["bytes"] >= 30_000 and row["parse_s"] > 0 and row["parse_linearity"] > 0 for row in report["rows"])


def test_bench_modelfile_refuses_a_tiny_size():
    result = cli("bench", "modelfile", "--size", "10")
    assert result.returncode == 2 and "--size" in result.stderr
