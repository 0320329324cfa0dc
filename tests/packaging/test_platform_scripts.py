"""Windows and macOS installers cannot be built here: their scripts are checked for syntax and for pointing at
files that exist; the GitHub Actions workflow parses and runs scripts that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from app.services.desktop_install import DESKTOP_ID

ROOT = Path(__file__).resolve().parents[2]
ISS = ROOT / "packaging" / "windows" / "llm-workstation.iss"
WORKFLOW = ROOT / ".github" / "workflows" / "packaging.yml"


def _iss_sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(";"):
            continue
        header = re.fullmatch(r"\[(\w+)\]", line)
        if header:
            current = header.group(1)
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return sections


def test_inno_setup_script_has_the_required_sections_and_directives():
    text = ISS.read_text(encoding="utf-8")
    sections = _iss_sections(text)
    for name in ("Setup", "Files", "Icons", "Run", "Languages"):
        assert name in sections, f"[{name}] missing"
    setup = dict(line.split("=", 1) for line in sections["Setup"])
    for key in ("AppId", "AppName", "AppVersion", "DefaultDirName", "OutputBaseFilename", "SetupIconFile"):
        assert key in setup, key
    assert re.fullmatch(r"\{\{[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}\}", setup["AppId"])
    assert (ISS.parent / setup["SetupIconFile"]).is_file()
    assert (ISS.parent / setup["LicenseFile"].replace("\\", "/")).resolve() == ROOT / "LICENSE"  # the licence page
    assert text.count("#ifndef") == text.count("#endif")
    assert any(line.startswith('Source: "{#BundleDir}\\*"') for line in sections["Files"])
    assert f'AppUserModelID: "{DESKTOP_ID}"' in text
    bundle_dir = re.search(r'#define BundleDir "([^"]+)"', text)
    assert bundle_dir and bundle_dir.group(1).replace("\\", "/") == "../../dist/llm-workstation"  # build_bundle's


def test_macos_recipe_is_valid_bash_and_matches_the_spec():
    script = ROOT / "packaging" / "macos" / "build_dmg.sh"
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    spec = (ROOT / "packaging" / "llm-workstation.spec").read_text(encoding="utf-8")
    assert f'DESKTOP_ID = "{DESKTOP_ID}"' in spec and "bundle_identifier=DESKTOP_ID" in spec
    assert 'name="LLM Workstation.app"' in spec and "dist/LLM Workstation.app" in script.read_text()
    assert (ROOT / "packaging" / "macos" / "llm-workstation.icns").is_file()


def test_workflow_parses_and_runs_scripts_that_exist():
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert triggers and set(workflow["jobs"]) == {"linux", "windows", "macos"}
    commands = []
    for name, job in workflow["jobs"].items():
        assert job["runs-on"].startswith({"linux": "ubuntu", "windows": "windows", "macos": "macos"}[name])
        commands += [step["run"] for step in job["steps"] if "run" in step]
        assert any(step.get("uses", "").startswith("actions/upload-artifact") for step in job["steps"])
    referenced = {m.replace("\\", "/") for c in commands for m in re.findall(r"packaging[\\/][\w./\\-]+", c)}
    assert referenced, "the workflow builds nothing from packaging/"
    for path in referenced:
        assert (ROOT / path).exists(), f"the workflow runs {path}, which does not exist"


@pytest.mark.parametrize("script", ["build_bundle.py", "linux_packages.py", "render_icons.py"])
def test_packaging_scripts_show_help(script):
    import sys

    if script == "render_icons.py":  # no CLI: check it compiles
        compile((ROOT / "packaging" / script).read_text(), script, "exec")
        return
    done = subprocess.run([sys.executable, str(ROOT / "packaging" / script), "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "usage:" in done.stdout
