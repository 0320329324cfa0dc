"""``llm-workstation modelfile parse|check|fmt`` and the shipped presets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PRESETS = sorted((Path(__file__).resolve().parents[2] / "modelfiles").glob("*.Modelfile"))


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
    assert len(PRESETS) >= 5


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_every_preset_parses_and_checks_clean(preset):
    from app.core.modelfile import parse_modelfile
    from app.core.modelfile_params import check_modelfile

    modelfile = parse_modelfile(preset.read_bytes())
    result = check_modelfile(modelfile)
    assert result.problems == [] and result.warnings == []
    assert modelfile.froms() and modelfile.format()


def test_coding_preset_is_what_the_issue_asks():
    from app.core.modelfile import parse_modelfile
    from app.core.modelfile_params import check_modelfile

    modelfile = parse_modelfile((PRESETS[0].parent / "coding-assistant.Modelfile").read_bytes())
    typed = check_modelfile(modelfile).parameters
    assert typed["num_ctx"] == 32768
    assert typed["temperature"] == pytest.approx(0.2) and typed["top_p"] == pytest.approx(0.9)
    assert modelfile.system and "engineer" in modelfile.system
