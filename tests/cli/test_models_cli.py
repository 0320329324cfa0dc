"""``llm-workstation models [--json]`` and ``bench library``, over real generated GGUFs."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

import pytest

from app.cli import models as commands_models
from tests.services.test_library import add_ollama_model, tiny_parameter_count, write_hf_folder

JSON_FIELDS = {
    "path", "name", "kind", "source", "architecture", "parameter_count", "quantization",
    "size_bytes", "context_length", "backend", "error",
}  # fmt: skip


@pytest.fixture(autouse=True)
def empty_hub_and_ollama(tmp_path, monkeypatch):
    """The user's real HF cache and Ollama store stay out of the tests."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    return tmp_path


def models(capsys, *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="llm-workstation")
    verbs = parser.add_subparsers(dest="verb")
    commands_models.add_parser(verbs)
    bench = verbs.add_parser("bench")
    commands_models.add_bench_parser(bench.add_subparsers(dest="bench_kind"))
    args = parser.parse_args(list(argv))
    code = commands_models.run_bench(args) if args.verb == "bench" else commands_models.run(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def folder(tmp_path, tiny_gguf, truncated_gguf):
    folder = tmp_path / "my-models"
    folder.mkdir()
    shutil.copyfile(tiny_gguf, folder / "tiny.gguf")
    shutil.copyfile(truncated_gguf, folder / "cut.gguf")
    write_hf_folder(folder / "hf-model")
    add_ollama_model(tmp_path / "ollama", "tiny", "q8", tiny_gguf)
    return folder


def test_json_lists_every_model_with_the_documented_fields(capsys, folder, tiny_gguf):
    code, out, err = models(capsys, "models", "--json", "--folder", str(folder))
    assert code == 0 and err == ""
    items = json.loads(out)
    assert all(set(item) >= JSON_FIELDS for item in items)
    by_name = {item["name"]: item for item in items}
    tiny = by_name["tiny-test-model"]
    assert (tiny["kind"], tiny["backend"], tiny["quantization"], tiny["context_length"]) == (
        "gguf", "llama.cpp", "F16", 2048
    )  # fmt: skip
    assert tiny["size_bytes"] == tiny_gguf.stat().st_size and tiny["path"] == str(folder / "tiny.gguf")
    assert by_name["hf-model"]["backend"] == "vLLM" and by_name["hf-model"]["architecture"] == "LlamaForCausalLM"
    assert by_name["tiny:q8"]["source"] == "ollama"
    assert "truncated" in by_name["cut.gguf"]["error"]
    assert items[-1]["name"] == "cut.gguf"  # broken files last


def test_table_shows_models_and_errors(capsys, folder, tiny_gguf):
    code, out, _err = models(capsys, "models", "--folder", str(folder))
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == list(commands_models.COLUMNS)
    row = next(line for line in lines if line.startswith("tiny-test-model"))
    params = commands_models.human_count(tiny_parameter_count(tiny_gguf))
    assert row.split()[1:4] == ["llama", params, "F16"] and "llama.cpp" in row and "2,048" in row
    assert any(line.startswith("! cut.gguf:") and "truncated" in line for line in lines)


def test_empty_library_says_what_to_do(capsys):
    code, out, _err = models(capsys, "models")
    assert code == 0 and "No models found" in out and "--folder" in out


def test_missing_folder_is_bad_input(capsys, tmp_path):
    code, out, err = models(capsys, "models", "--folder", str(tmp_path / "nope"))
    assert (code, out) == (2, "")
    assert err == f"llm-workstation: {tmp_path / 'nope'} is not a folder. Pass an existing folder with --folder.\n"


@pytest.mark.parametrize("content", ["{broken", "[" * 100_000, '{"a":' * 100_000])
def test_damaged_settings_file_is_bad_input(capsys, isolated_home, content):
    settings = isolated_home / "config" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(content)
    code, _out, err = models(capsys, "models")
    assert code == 2 and err.startswith("llm-workstation: Cannot read the settings file") and err.count("\n") == 1
    assert "Fix or remove it." in err and "Traceback" not in err
    assert settings.read_text() == content


def test_unreadable_folder_is_reported_on_stderr(capsys, folder, monkeypatch):
    real_scandir = os.scandir
    locked = folder / "hf-model"

    def scandir(path):  # tests run as root, where chmod 000 does not stop reading: simulate the refusal
        if str(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, out, err = models(capsys, "models", "--json", "--folder", str(folder))
    assert code == 0 and "tiny-test-model" in out
    assert f"Cannot read {locked}: permission denied" in err


def test_bench_library_compares_first_and_cached_scans(capsys):
    code, out, _err = models(capsys, "bench", "library", "--files", "6", "--runs", "2", "--json")
    report = json.loads(out)
    assert code == 0
    assert (report["files"], report["entries"], report["first_scan_headers_read"]) == (6, 6, 6)
    assert report["cached_scan_headers_read"] == 0
    assert report["first_scan_s"] > 0 and report["cached_scan_s"] > 0 and report["speedup"] > 0


def test_bench_library_rejects_zero_files(capsys):
    code, _out, err = models(capsys, "bench", "library", "--files", "0")
    assert code == 2 and "--files" in err


def test_the_verb_is_registered(folder, tmp_path):
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "OLLAMA_MODELS": str(tmp_path / "ollama")}
    done = subprocess.run(
        [sys.executable, "-m", "app", "models", "--json", "--folder", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "tiny-test-model" in {item["name"] for item in json.loads(done.stdout)}
