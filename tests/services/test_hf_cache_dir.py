"""Downloads and the library find the Hugging Face cache in one place, the one huggingface_hub itself uses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.settings import Settings
from app.services.downloads.job_runner import JobControl, run_job
from app.services.downloads.jobs import DONE, repo_cache_dir
from app.services.library.hf_cache import hf_hub_cache_dir
from app.services.library.index import LibraryRoots, ModelLibrary
from app.services.paths import app_paths
from tests.support.hf_server import HubServer, Repo, random_bytes, use_hub

VARIABLES = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")

# (environment, expected cache below tmp_path); "~" is tmp_path/home
CASES = {
    "HF_HUB_CACHE": ({"HF_HUB_CACHE": "{tmp}/hub-cache"}, "hub-cache"),
    "HF_HUB_CACHE beats HF_HOME": ({"HF_HUB_CACHE": "{tmp}/a", "HF_HOME": "{tmp}/b"}, "a"),
    "legacy HUGGINGFACE_HUB_CACHE": ({"HUGGINGFACE_HUB_CACHE": "{tmp}/legacy"}, "legacy"),
    "HF_HOME": ({"HF_HOME": "{tmp}/hf-home"}, "hf-home/hub"),
    "HF_HOME with ~": ({"HF_HOME": "~/hf"}, "home/hf/hub"),
    "XDG_CACHE_HOME": ({"XDG_CACHE_HOME": "{tmp}/xdg"}, "xdg/huggingface/hub"),
    "default": ({}, "home/.cache/huggingface/hub"),
    "empty is unset": ({"HF_HUB_CACHE": "", "HF_HOME": ""}, "home/.cache/huggingface/hub"),
}


def _environment(monkeypatch, tmp_path: Path, variables: dict[str, str]) -> dict[str, str]:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    return dict(os.environ)


def _huggingface_hub_says(env: dict[str, str]) -> Path:
    """The cache a fresh huggingface_hub resolves in this environment (it reads the variables at import)."""
    code = "from huggingface_hub import constants; print(constants.HF_HUB_CACHE)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return Path(done.stdout.strip())


@pytest.mark.parametrize("case", CASES)
def test_downloads_the_library_and_huggingface_hub_agree(monkeypatch, tmp_path, case):
    variables, expected = CASES[case]
    env = _environment(monkeypatch, tmp_path, variables)
    cache = hf_hub_cache_dir()
    assert cache == tmp_path / expected
    assert repo_cache_dir("org/model") == cache / "models--org--model"  # where a download lands
    assert LibraryRoots.from_settings(Settings(), app_paths()).hf_cache == cache  # where the library looks
    if case != "empty is unset":  # huggingface_hub takes an empty variable as the path ""
        assert _huggingface_hub_says(env) == cache


def test_a_download_to_the_legacy_cache_variable_is_in_the_library(monkeypatch, tmp_path):
    """Only HUGGINGFACE_HUB_CACHE set: downloads once found it through huggingface_hub, the library did not."""
    with HubServer() as hub:
        use_hub(hub, monkeypatch, tmp_path)
        _environment(monkeypatch, tmp_path, {"HUGGINGFACE_HUB_CACHE": "{tmp}/elsewhere"})
        hub.add(Repo("org/Small-GGUF", {"small-Q8_0.gguf": random_bytes(2000, 4)}, tags=["gguf"]))
        from app.services.downloads.hub import HubService

        service = HubService()
        job = service.plan_download(service.repo_detail("org/Small-GGUF", with_card=False), target_dir="")
        run_job(job, JobControl())
        assert job.state == DONE, job.error
    assert Path(job.local_path).is_relative_to(tmp_path / "elsewhere")
    scan = ModelLibrary(LibraryRoots.from_settings(Settings(), app_paths())).scan()
    found = [e for e in scan.entries if e.repo_id == "org/Small-GGUF"]
    assert [Path(e.path).name for e in found] == ["small-Q8_0.gguf"]
