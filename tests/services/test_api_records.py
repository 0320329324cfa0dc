"""The API server's request log: each request keeps its place as it changes, the oldest fall off past the limit,
and every change reaches the listeners (a broken one is logged, not raised into the request)."""

from __future__ import annotations

import logging

from app.services.api.records import RequestLog, RequestState


def test_a_request_keeps_its_place_as_it_changes_while_others_run():
    requests = RequestLog(max_recent=10)
    first, second = requests.open("127.0.0.1", "chat.completions"), requests.open("127.0.0.1", "messages")
    first.update(model="a")
    second.update(model="b")
    first.first_token()  # the earlier request changes after the later one
    first.finish(200, completion_tokens=5)
    assert [(r.endpoint, r.model, r.state) for r in requests.recent()] == [
        ("chat.completions", "a", RequestState.DONE), ("messages", "b", RequestState.WAITING)]  # fmt: skip
    assert requests.recent()[0].completion_tokens == 5


def test_past_the_limit_the_oldest_requests_fall_off():
    requests = RequestLog(max_recent=3)
    trackers = [requests.open("127.0.0.1", f"e{i}") for i in range(5)]
    for tracker in trackers:
        tracker.update(model="m")
    assert [r.endpoint for r in requests.recent()] == ["e2", "e3", "e4"]
    trackers[0].finish(200)  # a request already dropped comes back as the newest, not at its old place
    assert [r.endpoint for r in requests.recent()] == ["e3", "e4", "e0"]


def test_listeners_hear_every_change_and_a_broken_one_does_not_fail_the_request(caplog):
    requests = RequestLog()
    heard = []
    requests.subscribe(lambda record: heard.append(record.state))
    requests.subscribe(lambda record: 1 / 0)
    tracker = requests.open("127.0.0.1", "chat.completions")
    with caplog.at_level(logging.ERROR, logger="app.services.api"):
        tracker.update(model="m")
        tracker.finish(500, error="engine died")
    assert heard == [RequestState.WAITING, RequestState.FAILED]
    assert "a request-log listener failed" in caplog.text
