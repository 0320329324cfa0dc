"""Packaging tests: the scripts in packaging/ loaded by path (that folder is not a package: its name would shadow
PyPI's ``packaging``), and ONE PyInstaller bundle per test session shared by the bundle and .deb tests."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
# A bundle built earlier (a developer's dist/llm-workstation) can be reused: LLMW_TEST_BUNDLE=dist/llm-workstation.
REUSE_ENV = "LLMW_TEST_BUNDLE"
LICENSE = ROOT / "LICENSE"


def assert_is_the_licence(text: str) -> None:
    """``text`` is the repository's LICENSE: the MIT licence with the project's copyright line (every copy of the
    app must carry that notice)."""
    assert text == LICENSE.read_text(encoding="utf-8")
    assert text.startswith("MIT License\n") and "Copyright (c) 2026 The LLM Workstation developers" in text
    assert "Permission is hereby granted, free of charge, to any person obtaining a copy" in text


def load_script(name: str) -> ModuleType:
    """packaging/<name>.py as a module."""
    module_name = f"llmw_packaging_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, PACKAGING / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def bundle_dir(tmp_path_factory) -> Path:
    """The one-folder bundle, built once per session (about 30 s on 2 cores)."""
    reuse = os.environ.get(REUSE_ENV)
    if reuse:
        return Path(reuse).absolute()
    build = load_script("build_bundle")
    root = tmp_path_factory.mktemp("bundle")
    started = time.monotonic()
    bundle = build.build(root / "dist", root / "work")
    print(f"\nbundle built in {time.monotonic() - started:.0f} s: {build.folder_bytes(bundle) / 2**20:.0f} MiB")
    return bundle


@pytest.fixture(scope="session")
def bundle_env(tmp_path_factory) -> dict[str, str]:
    """The environment a packaged app is started with in tests: offscreen Qt, a throwaway app home."""
    home = tmp_path_factory.mktemp("bundle-home")
    return dict(os.environ, QT_QPA_PLATFORM="offscreen", LLMW_HOME=str(home), PYTHONPATH="")
