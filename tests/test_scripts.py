"""The scripts under scripts/ import only modules that exist (a moved module must not leave one stale)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "scripts").glob("*.py"))


def _app_modules(script: Path) -> list[str]:
    tree = ast.parse(script.read_text(encoding="utf-8"))
    names = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    return sorted({name for name in names if name == "app" or name.startswith("app.")})


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_app_module_a_script_imports_exists(script: Path) -> None:
    modules = _app_modules(script)
    assert modules, f"{script.name} imports nothing from app; this check would prove nothing"
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    assert not missing, f"{script.name} imports modules that no longer exist: {missing}"
