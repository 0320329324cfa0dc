"""The wheel carries the package data — the Modelfile presets, icons, desktop entry — and the LICENSE; an
installed copy of it lists the presets as the Modelfile page does. Built offline: `pip wheel
--no-build-isolation` with the venv's setuptools (the test extra), from a copy of the sources so no build/ lands
in the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.packaging.conftest import assert_is_the_licence
from tests.packaging.presets_probe import PROBE, probe_result, source_preset_names

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_file(tmp_path_factory) -> Path:
    """A wheel of the current sources (about 2 s)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source)
    shutil.copytree(ROOT / "app", source / "app", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run([*argv, str(source), "-w", str(work / "out")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (wheel,) = (work / "out").glob("llm_workstation-*.whl")
    return wheel


def test_wheel_carries_the_presets_and_resources(wheel_file):
    names = set(zipfile.ZipFile(wheel_file).namelist())
    presets = sorted((n.rsplit("/", 1)[1] for n in names if n.startswith("app/resources/modelfiles/")), key=str.lower)
    assert presets == source_preset_names()
    assert "app/resources/icons/llm-workstation.svg" in names
    assert "app/resources/desktop/io.github.llmworkstation.LLMWorkstation.desktop" in names
    assert not any(n.startswith(("modelfiles/", "tests/")) for n in names)


def test_wheel_carries_the_licence_in_its_metadata(wheel_file):
    """PEP 639: pyproject's license-files puts LICENSE in the .dist-info's licenses/, named in METADATA."""
    from app import __version__

    dist_info = f"llm_workstation-{__version__}.dist-info"
    with zipfile.ZipFile(wheel_file) as wheel:
        assert_is_the_licence(wheel.read(f"{dist_info}/licenses/LICENSE").decode("utf-8"))
        metadata = wheel.read(f"{dist_info}/METADATA").decode("utf-8").splitlines()
    assert "License-Expression: MIT" in metadata and "License-File: LICENSE" in metadata


def test_installed_wheel_lists_the_presets_on_the_modelfile_page(wheel_file, tmp_path):
    """Installed into a folder of its own (--no-deps: Qt and the rest come from this venv), run from elsewhere:
    the page's file list finds the presets inside the installed package, not in this checkout."""
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target)]
    done = subprocess.run([*install, str(wheel_file)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    env = dict(os.environ, PYTHONPATH=str(target), QT_QPA_PLATFORM="offscreen")
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = probe_result(probe.stdout)
    assert Path(str(found["app"])).is_relative_to(target), found  # the installed copy, not the checkout
    assert Path(str(found["presets_dir"])) == target / "app" / "resources" / "modelfiles"
    assert found["listed"] == source_preset_names()
