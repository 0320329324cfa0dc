"""The UI tests' guards themselves: a Qt warning is recorded and must be declared, and a task left running
after a test is cancelled and named."""

from __future__ import annotations

import asyncio

from PySide6.QtGui import QPainter

from tests.support.leaked_tasks import settle
from tests.support.qt_messages import QtMessageRecorder


def _painter_misuse() -> None:
    """A real Qt warning: ending a QPainter that never began."""
    QPainter().end()


def test_a_declared_qt_warning_passes(qtbot, expect_qt_warning):
    expect_qt_warning(r"QPainter::end: Painter not active")  # teardown fails if it does not come
    _painter_misuse()


def test_an_undeclared_qt_warning_is_a_problem(qtbot):
    recorder = QtMessageRecorder()
    recorder.install()  # on top of the test's own recorder, which sees nothing meanwhile
    try:
        _painter_misuse()
    finally:
        recorder.uninstall()
    (problem,) = recorder.problems()
    assert problem.startswith("Qt warning") and "Painter not active" in problem
    recorder.expect("Painter not active")
    assert recorder.problems() == []
    recorder.expect("never said")
    assert recorder.problems() == ["expected a Qt warning matching 'never said'; none came"]


def test_a_task_left_running_is_cancelled_and_named(qloop):
    async def forever() -> None:
        await asyncio.Event().wait()

    async def scenario() -> tuple[asyncio.Task, list[str]]:
        before = asyncio.all_tasks()
        quick = asyncio.ensure_future(asyncio.sleep(0.01))
        stuck = asyncio.ensure_future(forever())
        stuck.set_name("stuck-task")
        late = await settle(before, grace=0.3)
        assert quick.done() and not quick.cancelled()  # a task that ends within the grace period is fine
        return stuck, late

    stuck, late = qloop.run_until_complete(scenario())
    assert stuck.cancelled()
    assert len(late) == 1 and late[0].startswith("stuck-task (") and "forever" in late[0]
