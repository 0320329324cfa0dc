"""The vLLM page's Environment box: which interpreter has vLLM (detected off the Qt thread), and installing one
into the app's own environment with pip's output streamed below and Cancel."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QSizePolicy,
    QWidget,
)

from app.core.vllm.log import InstallProgress
from app.services.paths import AppPaths
from app.services.vllm.environment import VllmEnvironment, VllmInstall, VllmInstallError, default_env_dir
from app.ui.pages.modelfiles.editor import error_color, muted_color, set_text_color
from app.ui.pages.vllm.log_tail import LogTail
from app.ui.tasks import spawn
from app.ui.widgets.factories import slot_button, wrapped_label

Detector = Callable[[str], VllmInstall | None]  # blocking (run in an executor); "" looks in the usual places
Installer = Callable[[Path, Callable[[InstallProgress], None]], Awaitable[VllmInstall]]


class VllmEnvironmentBox(QGroupBox):
    """``python_chosen`` carries an interpreter the user picked or installed (to remember in the settings);
    ``detected`` the :class:`VllmInstall` found (or None) after each detection."""

    python_chosen = Signal(str)
    detected = Signal(object)

    def __init__(
        self,
        paths: AppPaths,
        python: str = "",
        *,
        detector: Detector | None = None,
        installer: Installer | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__("Environment", parent)
        self.target_dir = default_env_dir(paths)
        self._detector: Detector = detector or (lambda p: VllmEnvironment(Path(p) if p else None, paths).detect())
        self._installer: Installer = installer or VllmEnvironment(paths=paths).install
        self.install: VllmInstall | None = None
        self._install_task: asyncio.Task[Any] | None = None
        self._remembered = python
        self._dialog: QFileDialog | None = None
        self.python_edit = QLineEdit(python, placeholderText="The python of an environment with vLLM (its bin/python)")
        self.browse_button = slot_button("Browse…", self.browse)
        self.status = wrapped_label("Looking for vLLM…", "vllm_env_status")
        self.install_button = slot_button("Install vLLM", self.install_vllm)
        self.install_button.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        self.install_button.setToolTip(f"Creates {self.target_dir} and pip-installs vLLM into it (several GB).")
        self.cancel_button = slot_button("Cancel", self.cancel_install)
        self.progress = QProgressBar(maximum=1000)
        self.install_status = wrapped_label(name="vllm_install_status")
        self.install_log = LogTail(300)
        self.install_log.setMaximumHeight(140)
        grid = QGridLayout(self)
        grid.addWidget(QLabel("Interpreter"), 0, 0)
        grid.addWidget(self.python_edit, 0, 1)
        grid.addWidget(self.browse_button, 0, 2)
        grid.addWidget(self.status, 1, 1, 1, 2)
        row = QHBoxLayout()
        for widget, stretch in ((self.install_button, 0), (self.progress, 1), (self.cancel_button, 0)):
            row.addWidget(widget, stretch)
        row.addStretch(0)
        grid.addLayout(row, 2, 1, 1, 2)
        grid.addWidget(self.install_status, 3, 1, 1, 2)
        grid.addWidget(self.install_log, 4, 0, 1, 3)
        hidden: tuple[QWidget, ...] = (self.cancel_button, self.progress, self.install_log, self.install_status)
        for part in hidden:
            part.hide()
        self.python_edit.editingFinished.connect(self._edited)

    @property
    def python(self) -> str:
        return self.python_edit.text().strip()

    @property
    def installing(self) -> bool:
        return self._install_task is not None and not self._install_task.done()

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
        self._say(self.status, f"Looking for vLLM in {python}…" if python else "Looking for vLLM…", muted=True)
        install = await asyncio.get_running_loop().run_in_executor(None, self._detector, python)
        if python != self.python:
            return  # edited meanwhile: a newer detection is on its way
        self.install = install
        if install is not None and not python:
            self.python_edit.setText(str(install.python))
            self._remembered = str(install.python)
        self._say(self.status, describe(install, python, self.target_dir), muted=install is None)
        self.install_button.setText("Reinstall vLLM" if install else "Install vLLM")
        self.detected.emit(install)

    # --- installing ------------------------------------------------------------------------------------------
    def install_vllm(self) -> asyncio.Task[Any]:
        """Install vLLM into the app's own environment; the running install's task if one runs."""
        if self._install_task is None or self._install_task.done():
            self._install_task = spawn(self._install(self.target_dir), "vllm: install")
        return self._install_task

    def cancel_install(self) -> None:
        if self._install_task is not None:
            self._install_task.cancel()

    async def shutdown(self) -> None:
        if self.installing and self._install_task is not None:
            self._install_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._install_task

    async def _install(self, target: Path) -> None:
        self._busy(True)
        self.install_log.clear()
        self.install_log.show()
        self._say(self.install_status, f"Installing vLLM into {target}. This downloads several GB…")
        try:
            install = await self._installer(target, self._progressed)
        except VllmInstallError as exc:
            self._say(self.install_status, str(exc), error=True)
        except asyncio.CancelledError:
            self._say(self.install_status, "Install cancelled; the unfinished environment was removed.")
            raise
        else:
            self.python_edit.setText(str(install.python))
            self._remembered = str(install.python)
            self._say(self.install_status, f"Installed {install.distribution} {install.version} in {target}.")
            self.python_chosen.emit(str(install.python))
            await self._detect()
        finally:
            self._busy(False)

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

    def _say(self, label: QLabel, text: str, error: bool = False, muted: bool = False) -> None:
        label.setText(text)
        label.setVisible(bool(text))
        palette = self.palette()
        color = error_color(palette) if error else muted_color(palette) if muted else None
        set_text_color(label, color or palette.color(QPalette.ColorRole.WindowText))


def describe(install: VllmInstall | None, python: str, default_dir: Path) -> str:
    """What was found, or what to do when nothing was."""
    if install is not None:
        build = ", CPU build" if install.cpu_build else ""
        torch = f", torch {install.torch_version}" if install.torch_version else ""
        how = "python -m vllm.entrypoints.openai.api_server" if install.use_module else "the vllm command"
        return f"vLLM {install.version} ({install.distribution}{build}{torch}); started with {how}."
    if python and not Path(python).exists():
        return f"{python} does not exist. Choose the python of an environment that has vLLM, or Install vLLM."
    if python:
        return f"No vLLM in {python}. Choose the python of an environment that has vLLM, or Install vLLM."
    return f"vLLM is not installed yet. Install vLLM (into {default_dir}; several GB), or choose its python above."
