"""``chat --spec`` and ``bench spec`` through the real CLI, on tiny GGUFs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.gguf_factory import write_tiny_gguf


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("spec-cli")
    model = write_tiny_gguf(folder / "model.gguf", never_eos=True, name="model")
    draft = write_tiny_gguf(folder / "draft.gguf", never_eos=True, n_layer=1, seed=3, name="draft")
    return model, draft


def _figures(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.rstrip("\n").split("\n")[-1])


def test_chat_json_figures_say_how_the_reply_speculated(pair):
    model, draft = pair
    ask = ("chat", str(model), "-p", "the cat sat on the mat. the cat sat on the mat. the", "--temperature", "0")
    plain = _figures(cli(*ask, "--max-tokens", "24", "--json"))
    ngram = _figures(cli(*ask, "--max-tokens", "24", "--json", "--spec", "ngram"))
    drafted = _figures(cli(*ask, "--max-tokens", "24", "--json", "--spec", f"draft:{draft}"))
    assert plain["spec_mode"] == "off" and plain["drafted"] == 0 and plain["acceptance"] is None
    for figures, mode in ((ngram, "ngram"), (drafted, "draft")):
        assert figures["spec_mode"] == mode and figures["text"] == plain["text"]
        assert 0 <= figures["accepted"] <= figures["drafted"]
    # n-gram lookup proposes only after a repeated token pair, which a random-weight model's reply may never make
    # (the backend tests count its drafts on a repeating text); a draft model proposes at every step
    assert drafted["drafted"] > 0
    assert drafted["acceptance"] == pytest.approx(drafted["accepted"] / drafted["drafted"], abs=1e-4)
    if ngram["drafted"]:
        assert ngram["acceptance"] == pytest.approx(ngram["accepted"] / ngram["drafted"], abs=1e-4)
    else:
        assert ngram["acceptance"] is None


def test_a_bad_spec_setting_exits_2_saying_what_is_accepted(pair, tmp_path):
    model, _ = pair
    result = cli("chat", str(model), "-p", "hi", "--spec", "fast")
    assert result.returncode == 2 and '"off", "ngram" or "draft:' in result.stderr
    result = cli("chat", str(model), "-p", "hi", "--spec", f"draft:{model}")
    assert result.returncode == 2 and "it is the model itself" in result.stderr
    assert "Traceback" not in result.stderr


def test_bench_spec_reports_every_mode_and_checks_the_text(pair):
    model, draft = pair
    result = cli("bench", "spec", str(model), "--draft", str(draft), "--max-tokens", "8", "--rounds", "1", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [row["mode"] for row in report["modes"]] == ["off", "ngram", "draft"]
    assert report["identical"] and report["mismatches"] == []
    for row in report["modes"]:
        for kind in ("copy", "free"):
            assert row[kind]["decode_tokens_per_s"] > 0
    assert report["modes"][0]["copy"]["ratio_vs_off"] == pytest.approx(1.0)
    assert report["modes"][2]["copy"]["drafted"] > 0
    assert report["guarded_free"]["replies"] > 0 and report["guarded_free"]["ratio_vs_off"] > 0
