"""The notice area: success and info notices go by themselves, at most two banners at once (the oldest that is not
an error makes room), errors stay until dismissed; ``gone`` says when a notice left without its action taken."""

from __future__ import annotations

import pytest

from app.ui.widgets import notices
from app.ui.widgets.notices import NoticeArea


@pytest.fixture
def area(qtbot) -> NoticeArea:
    widget = NoticeArea()
    qtbot.addWidget(widget)
    widget.show()
    return widget


def _keys(area: NoticeArea) -> list[str]:
    return [n.key for n in area.notices()]


def _shown(area: NoticeArea) -> list[str]:
    return area.text().splitlines()


def test_success_and_info_go_by_themselves_while_an_error_stays(area, qtbot, monkeypatch) -> None:
    monkeypatch.setitem(notices.AUTO_DISMISS_MS, "success", 30)
    monkeypatch.setitem(notices.AUTO_DISMISS_MS, "info", 60)
    area.show_notice("The disk is full.", "error", key="disk")
    with qtbot.waitSignal(area.expired) as expired:
        area.show_notice("Exported.", "success", key="export")
    assert expired.args == ["export"] and _keys(area) == ["disk"]
    with qtbot.waitSignal(area.expired) as expired:
        area.show_notice("Loading the list…", "info", key="list")
    assert expired.args == ["list"]
    assert _keys(area) == ["disk"] and area.isVisible()  # outlived two notices that went by themselves
    area.dismiss("disk")
    assert _keys(area) == [] and not area.isVisible()


def test_which_notices_wait_and_for_how_long(area) -> None:
    area.show_notice("Exported.", "success", key="success")
    area.show_notice("Applied.", "info", key="info")
    assert 0 < area.time_left_ms("success") <= 5_000 and 0 < area.time_left_ms("info") <= 8_000
    area.show_notice("The disk is full.", "error", key="error")
    area.show_notice("Cannot read it.", "warning", key="warning")
    assert area.time_left_ms("error") is None and area.time_left_ms("warning") is None
    area.show_notice("Preset applied.", "info", key="action", action=("Reload", lambda: None))
    area.show_notice("Importing…", "info", key="progress", timeout_ms=0)
    assert area.time_left_ms("action") is None and area.time_left_ms("progress") is None  # they wait
    area.show_notice("Imported 3 chats.", "success", key="progress")  # the same key: the new notice's time
    assert 0 < area.time_left_ms("progress") <= 5_000


def test_at_most_two_banners_the_oldest_non_error_makes_room(area, qtbot) -> None:
    gone: list[str] = []
    area.gone.connect(gone.append)
    area.show_notice("first", "info", key="a", timeout_ms=0)
    area.show_notice("second", "warning", key="b")
    area.show_notice("third", "success", key="c", timeout_ms=0)
    assert _shown(area) == ["third", "second"] and gone == ["a"]
    area.show_notice("fourth", "error", key="d")
    assert _shown(area) == ["fourth", "third"] and gone == ["a", "b"]

    def banners():
        return [b for b in area.findChildren(notices._Banner) if b.parent() is area and b.isVisibleTo(area)]

    qtbot.waitUntil(lambda: len(banners()) == 2)  # a widget added to a shown layout shows on the next turn
    assert [b.notice.key for b in banners()] == ["d", "c"]


def test_errors_are_never_pushed_out_they_wait_for_a_place(area) -> None:
    area.show_notice("error one", "error", key="e1")
    area.show_notice("error two", "error", key="e2")
    area.show_notice("a hint", "info", key="hint", timeout_ms=0)
    assert _shown(area) == ["a hint", "error two"] and _keys(area) == ["hint", "e2", "e1"]
    area.dismiss("hint")
    assert _shown(area) == ["error two", "error one"]


def test_an_action_runs_without_gone_a_dismiss_says_gone(area, qtbot) -> None:
    gone: list[str] = []
    ran: list[str] = []
    area.gone.connect(gone.append)
    area.show_notice("Deleted “Birds”.", key="undo", action=("Undo", lambda: ran.append("undo")))
    area.run_action("undo")
    assert ran == ["undo"] and gone == [] and _keys(area) == []
    area.show_notice("Deleted “Fish”.", key="undo2", action=("Undo", lambda: ran.append("undo2")))
    area.dismiss("undo2")
    assert ran == ["undo"] and gone == ["undo2"]
    area.show_notice("one", "warning", key="w1")
    area.show_notice("two", "error", key="w2")
    area.clear()
    assert set(gone) == {"undo2", "w1", "w2"} and _keys(area) == []
