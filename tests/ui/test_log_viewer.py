"""LogViewer: live records from any thread, level and text filters, bounded view, copy and clear."""

from __future__ import annotations

import logging
import threading

import pytest
from PySide6.QtWidgets import QApplication

from app.ui.log_viewer import LogViewer


@pytest.fixture
def viewer(qtbot, buffer):
    widget = LogViewer(buffer)
    qtbot.addWidget(widget)
    widget.show()
    return widget


def _log_levels(logger: logging.Logger) -> None:
    logger.debug("debug line")
    logger.info("info line")
    logger.warning("warning line about Disk")
    logger.error("error line")


def test_shows_records_already_in_the_buffer(qtbot, logger, buffer):
    logger.info("logged before the viewer existed")
    widget = LogViewer(buffer)
    qtbot.addWidget(widget)
    assert "logged before the viewer existed" in widget.visible_text()


def test_shows_a_record_logged_on_another_thread(qtbot, logger, viewer):
    worker = threading.Thread(target=logger.info, args=("hello from the worker",))
    worker.start()
    worker.join()
    qtbot.waitUntil(lambda: "hello from the worker" in viewer.visible_text())
    assert viewer.visible_text().count("hello from the worker") == 1


def test_many_threads_each_record_shown_once(qtbot, logger, viewer):
    def work(n: int) -> None:
        for i in range(50):
            logger.info("t%d-%d", n, i)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    qtbot.waitUntil(lambda: viewer.text_view.blockCount() >= 200)
    text = viewer.visible_text()
    assert all(text.count(f"t{n}-{i}\n") + text.endswith(f"t{n}-{i}") == 1 for n in range(4) for i in range(50))


def test_level_filter(qtbot, logger, viewer):
    _log_levels(logger)
    qtbot.waitUntil(lambda: "error line" in viewer.visible_text())
    assert "debug line" in viewer.visible_text()

    viewer.set_level_filter("WARNING")
    text = viewer.visible_text()
    assert "warning line" in text and "error line" in text
    assert "info line" not in text and "debug line" not in text

    logger.info("later info")
    logger.error("later error")
    qtbot.waitUntil(lambda: "later error" in viewer.visible_text())
    assert "later info" not in viewer.visible_text()

    viewer.level_combo.setCurrentText("DEBUG")
    assert "later info" in viewer.visible_text()


def test_text_filter_is_case_insensitive(qtbot, logger, viewer):
    _log_levels(logger)
    qtbot.waitUntil(lambda: "error line" in viewer.visible_text())
    viewer.set_text_filter("disk")
    assert viewer.visible_text().splitlines() == [line for line in viewer.visible_text().splitlines() if "Disk" in line]
    assert "warning line about Disk" in viewer.visible_text()
    assert "error line" not in viewer.visible_text()

    logger.info("another disk note")
    logger.info("unrelated")
    qtbot.waitUntil(lambda: "another disk note" in viewer.visible_text())
    assert "unrelated" not in viewer.visible_text()
    viewer.set_text_filter("")
    assert "unrelated" in viewer.visible_text()


def test_block_count_is_bounded(qtbot, logger, buffer):
    widget = LogViewer(buffer, max_blocks=50)
    qtbot.addWidget(widget)
    for i in range(300):
        logger.info("line %d", i)
    qtbot.waitUntil(lambda: "line 299" in widget.visible_text())
    assert widget.text_view.blockCount() <= 50
    assert "line 0\n" not in widget.visible_text()


def test_follows_new_records_when_at_the_bottom(qtbot, logger, viewer):
    viewer.resize(500, 200)
    for i in range(200):
        logger.info("scroll %d", i)
    qtbot.waitUntil(lambda: "scroll 199" in viewer.visible_text())
    bar = viewer.text_view.verticalScrollBar()
    assert bar.maximum() > 0
    qtbot.waitUntil(lambda: bar.value() == bar.maximum())  # the layout may grow once more after the text

    bar.setValue(0)  # The user scrolled up to read: new records must not yank the view.
    logger.info("new while reading")
    qtbot.waitUntil(lambda: "new while reading" in viewer.visible_text())
    assert bar.value() == 0


def test_copy_all_and_clear(qtbot, logger, viewer, buffer):
    _log_levels(logger)
    qtbot.waitUntil(lambda: "error line" in viewer.visible_text())
    viewer.copy_button.click()
    assert QApplication.clipboard().text() == viewer.visible_text()
    assert "info line" in QApplication.clipboard().text()

    viewer.clear_button.click()
    assert viewer.visible_text() == ""
    assert buffer.records() == []
    logger.info("after clear")
    qtbot.waitUntil(lambda: "after clear" in viewer.visible_text())
    assert "info line" not in viewer.visible_text()


def test_unsubscribes_on_close_and_destruction(qtbot, logger, buffer):
    closed = LogViewer(buffer)
    qtbot.addWidget(closed)
    destroyed = LogViewer(buffer)
    assert buffer.subscriber_count() == 2

    closed.show()
    closed.close()
    assert buffer.subscriber_count() == 1
    logger.info("after close")  # unsubscribed above: nothing can bring it in until it is shown again
    assert "after close" not in closed.visible_text()

    closed.show()  # Reopened: resumes and catches up from the buffer.
    assert buffer.subscriber_count() == 2
    assert "after close" in closed.visible_text()
    closed.close()

    destroyed.deleteLater()
    qtbot.waitUntil(lambda: buffer.subscriber_count() == 0)
    worker = threading.Thread(target=logger.info, args=("nobody listens",))
    worker.start()
    worker.join()
    assert buffer.records()[-1].message == "nobody listens"
