"""BatchRunner against the fake vLLM server over real HTTP: fields, concurrency, order, resume, cancel, failures."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from app.core.batch.input import BatchRequest, parse_jsonl
from app.core.errors import ErrorKind
from app.services.batch.runner import BatchError, BatchProgress, BatchRunner
from tests.support import fake_http, fake_openai
from tests.support.fake_openai import FakeOpenAIServer


def run(coro, timeout_s: float = 30):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


@pytest.fixture
def fake(monkeypatch):
    # The fake's listen backlog (socketserver's default of 5) resets connections when many open at once.
    monkeypatch.setattr(fake_http.FakeHttpServer, "request_queue_size", 128)
    before = set(threading.enumerate())
    with FakeOpenAIServer(models=("tiny", "other")) as server:
        yield server
    assert not server.handler_errors
    assert not [t for t in threading.enumerate() if t not in before and t.is_alive()]


def prompts(count: int, **fields) -> list[BatchRequest]:
    return [
        BatchRequest(id=f"r{i}", line=i + 1, prompt=f"prompt number {i}", params=dict(fields)) for i in range(count)
    ]


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def generation_bodies(fake: FakeOpenAIServer) -> list[dict]:
    return [r.json for r in fake.requests if r.path.endswith("completions")]


# --- requests as sent -------------------------------------------------------------------------------------------
def test_chat_and_prompt_lines_go_to_their_endpoints_with_every_field_passed_through(fake, tmp_path):
    text = "\n".join(
        json.dumps(line)
        for line in (
            {"id": "c", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 12, "temperature": 0.3},
            {"id": "p", "prompt": "Once upon", "max_tokens": 6, "ignore_eos": True, "seed": 42, "top_p": 0.8,
             "stop": ["zzz"], "repetition_penalty": 1.1},
        )
    )  # fmt: skip
    out = tmp_path / "out.jsonl"
    summary = run(BatchRunner(fake.base_url, concurrency=2).run(parse_jsonl(text).requests, out))
    assert summary.model == "tiny" and summary.done == 2 and summary.failed == 0  # the first model /v1/models lists
    (chat,) = [r.json for r in fake.requests_to("/v1/chat/completions")]
    (completion,) = [r.json for r in fake.requests_to("/v1/completions")]
    streaming = {"stream": True, "stream_options": {"include_usage": True}}
    messages = [{"role": "user", "content": "hi there"}]
    assert chat == {"model": "tiny", "max_tokens": 12, "temperature": 0.3, "messages": messages, **streaming}
    assert completion == {"model": "tiny", "max_tokens": 6, "ignore_eos": True, "seed": 42, "top_p": 0.8,
                          "stop": ["zzz"], "repetition_penalty": 1.1, "prompt": "Once upon", **streaming}  # fmt: skip
    results = {r["id"]: r for r in lines(out)}
    assert results["c"]["output"] == "You said: hi there" and results["c"]["finish_reason"] == "stop"
    assert results["p"]["completion_tokens"] == 6 and results["p"]["finish_reason"] == "length"
    assert results["p"]["output"].startswith("You said: Once upon")
    for result in results.values():
        assert set(result) >= {"id", "output", "completion_tokens", "latency_ms", "ttft_ms", "error"}
        assert result["error"] is None and 0 < result["ttft_ms"] <= result["latency_ms"]
        assert result["prompt_tokens"] > 0


def test_a_given_model_is_used_without_asking_the_server(fake, tmp_path):
    run(BatchRunner(fake.base_url + "/v1/", model="other").run(prompts(2), tmp_path / "out.jsonl"))
    assert not fake.requests_to("/v1/models")
    assert {body["model"] for body in generation_bodies(fake)} == {"other"}


def test_a_line_can_name_its_own_model(fake, tmp_path):
    requests = [BatchRequest(id="x", line=1, prompt="hi", params={"model": "other"}), *prompts(1)]
    run(BatchRunner(fake.base_url, model="tiny").run(requests, tmp_path / "out.jsonl"))
    assert sorted(body["model"] for body in generation_bodies(fake)) == ["other", "tiny"]


def test_the_api_key_is_sent_and_a_wrong_one_is_a_clear_error(tmp_path):
    with FakeOpenAIServer(models=("tiny",), api_key="sekrit-key") as fake:
        run(BatchRunner(fake.base_url, api_key="sekrit-key").run(prompts(1), tmp_path / "a.jsonl"))
        assert fake.requests_to("/v1/completions")[0].headers["Authorization"] == "Bearer sekrit-key"
        for model in (None, "tiny"):  # found by the /v1/models check, or by the first request
            with pytest.raises(
                BatchError, match=r"refused the API key \(HTTP 401: Unauthorized\); check the API key$"
            ) as caught:
                run(BatchRunner(fake.base_url, api_key="wrong-key", model=model).run(prompts(3), tmp_path / "b.jsonl"))
            assert "wrong-key" not in str(caught.value)
            assert (caught.value.kind, caught.value.setting) == (ErrorKind.UNAVAILABLE, "api_key")
        assert (tmp_path / "b.jsonl").read_text() == ""


# --- concurrency, order, priority -------------------------------------------------------------------------------
@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_at_most_concurrency_requests_are_in_flight(fake, tmp_path, concurrency):
    fake.token_delay_s = 0.01
    summary = run(
        BatchRunner(fake.base_url, concurrency=concurrency).run(prompts(12, max_tokens=8), tmp_path / "o.jsonl")
    )
    assert summary.done == 12
    assert fake.max_in_flight == concurrency


def test_connections_are_kept_alive_and_reused(fake, tmp_path, monkeypatch):
    opened = []
    setup = fake_openai._Handler.setup

    def counting_setup(handler):
        opened.append(handler.client_address)
        setup(handler)

    monkeypatch.setattr(fake_openai._Handler, "setup", counting_setup)
    run(BatchRunner(fake.base_url, concurrency=2).run(prompts(20, max_tokens=3), tmp_path / "o.jsonl"))
    assert len(opened) <= 3  # the /v1/models check and two streams, never one per request


def test_shortest_first_launches_in_prompt_length_order(fake, tmp_path):
    requests = [BatchRequest(id=str(n), line=n, prompt="x" * n) for n in (5, 1, 9, 3, 1)]
    run(BatchRunner(fake.base_url, concurrency=1, order="shortest").run(requests, tmp_path / "o.jsonl"))
    assert [len(body["prompt"]) for body in generation_bodies(fake)] == [1, 1, 3, 5, 9]
    fake.requests.clear()
    run(BatchRunner(fake.base_url, concurrency=1).run(requests, tmp_path / "input-order.jsonl"))
    assert [len(body["prompt"]) for body in generation_bodies(fake)] == [5, 1, 9, 3, 1]


def test_priority_sends_vllm_priorities_shorter_first_and_a_line_can_set_its_own(fake, tmp_path):
    requests = [
        BatchRequest(id="long", line=1, prompt="x" * 30),
        BatchRequest(id="short", line=2, messages=[{"role": "user", "content": "x"}]),
        BatchRequest(id="mid", line=3, prompt="x" * 10),
        BatchRequest(id="own", line=4, prompt="x" * 10, params={"priority": -5}),
    ]
    run(BatchRunner(fake.base_url, priority=True).run(requests, tmp_path / "o.jsonl"))
    sent = sorted((body.get("prompt", "chat"), body["priority"]) for body in generation_bodies(fake))
    assert sent == [("chat", 0), ("x" * 10, -5), ("x" * 10, 1), ("x" * 30, 2)]
    fake.requests.clear()
    run(BatchRunner(fake.base_url).run(requests[:1], tmp_path / "no-priority.jsonl"))
    assert "priority" not in generation_bodies(fake)[0]


def test_a_server_without_priority_scheduling_gets_a_hint(fake, tmp_path):
    fake.fail("/v1/completions", error="Got priority 1 but Priority scheduling is not enabled.")
    requests = [BatchRequest(id="a", line=1, prompt="xx")]
    run(BatchRunner(fake.base_url, priority=True).run(requests, tmp_path / "o.jsonl"))
    (result,) = lines(tmp_path / "o.jsonl")
    assert result["error"].startswith("HTTP 400: Got priority 1 but Priority scheduling is not enabled.")
    assert "start vLLM with --scheduling-policy priority, or run without request priorities" in result["error"]


# --- results on disk, resuming, cancelling ----------------------------------------------------------------------
async def _run_until_lines_on_disk(runner, requests, out, count):
    task = asyncio.create_task(runner.run(requests, out))
    while not out.exists() or len(out.read_text().splitlines()) < count:
        await asyncio.sleep(0.005)
    return task


def test_a_killed_run_leaves_whole_lines_and_the_rerun_does_only_the_rest(fake, tmp_path):
    fake.token_delay_s = 0.01
    requests = prompts(30, max_tokens=5)
    out = tmp_path / "out.jsonl"

    async def kill_midway():
        task = await _run_until_lines_on_disk(BatchRunner(fake.base_url, concurrency=4), requests, out, 6)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(kill_midway())
    first = lines(out)  # every line parses: nothing half-written
    assert 6 <= len(first) < 30 and all(r["error"] is None for r in first)
    assert fake.wait_idle()
    fake.requests.clear()
    summary = run(BatchRunner(fake.base_url, concurrency=4).run(requests, out))
    assert summary.skipped == len(first) and summary.count == 30 - len(first) and summary.done == summary.count
    assert len(generation_bodies(fake)) == 30 - len(first)
    assert sorted(r["id"] for r in lines(out)) == sorted(r.id for r in requests)


def test_failed_ids_are_retried_by_the_next_run(fake, tmp_path):
    fake.fail("/v1/completions", status=500, error="engine hiccup", error_type="InternalServerError")
    out = tmp_path / "out.jsonl"
    first = run(BatchRunner(fake.base_url, concurrency=1).run(prompts(3), out))
    assert (first.done, first.failed) == (2, 1) and first.first_error == "r0: HTTP 500: engine hiccup"
    second = run(BatchRunner(fake.base_url, concurrency=1).run(prompts(3), out))
    assert (second.count, second.skipped, second.done) == (1, 2, 1)
    assert [(r["id"], r["error"]) for r in lines(out)] == [
        ("r0", "HTTP 500: engine hiccup"), ("r1", None), ("r2", None), ("r0", None)
    ]  # fmt: skip


def test_cancel_stops_launching_cancels_in_flight_and_keeps_what_finished(fake, tmp_path):
    fake.token_delay_s = 0.01
    out = tmp_path / "out.jsonl"
    runner = BatchRunner(fake.base_url, concurrency=3)

    async def cancel_midway():
        task = await _run_until_lines_on_disk(runner, prompts(20, max_tokens=6), out, 3)
        runner.cancel()
        return await task

    summary = run(cancel_midway())
    assert summary.cancelled and 3 <= summary.done < 20 and summary.failed == 0
    assert len(lines(out)) == summary.done
    assert len(generation_bodies(fake)) < 20
    assert fake.wait_idle() and fake.disconnects  # the server saw the in-flight streams closed


def test_progress_reports_counts_tokens_and_eta(fake, tmp_path):
    fake.token_delay_s = 0.01
    seen: list[BatchProgress] = []
    runner = BatchRunner(fake.base_url, concurrency=2, progress_interval_s=0.02)
    summary = run(runner.run(prompts(8, max_tokens=4, ignore_eos=True), tmp_path / "o.jsonl", seen.append))
    assert seen[0].done == 0 and seen[0].eta_s is None
    assert any(p.in_flight == 2 for p in seen)
    assert any(0 < p.done < 8 and p.eta_s is not None and p.eta_s > 0 for p in seen)
    last = seen[-1]
    assert (last.total, last.done, last.failed, last.in_flight, last.output_tokens) == (8, 8, 0, 0, 32)
    assert summary.output_tokens == 32 and summary.output_tokens_per_s > 0
    assert all(summary.latency_ms[k] is not None for k in ("p50", "p90", "p99"))
    assert summary.ttft_ms["p50"] <= summary.latency_ms["p50"]


def test_every_line_is_fsynced_when_asked(fake, tmp_path, monkeypatch):
    import os

    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    run(BatchRunner(fake.base_url, fsync_interval_s=0).run(prompts(4, max_tokens=2), tmp_path / "o.jsonl"))
    assert len(synced) == 5  # one per line, and one at the end


# --- failures ---------------------------------------------------------------------------------------------------
def test_errors_mid_stream_and_dropped_connections_are_recorded_per_request(fake, tmp_path):
    fake.fail("/v1/completions", error="engine died", error_type="InternalServerError", after=2)
    fake.fail("/v1/completions", after=1, die=True)
    out = tmp_path / "out.jsonl"
    summary = run(BatchRunner(fake.base_url, concurrency=1).run(prompts(3, max_tokens=5, ignore_eos=True), out))
    assert (summary.done, summary.failed) == (1, 2)
    first, second, third = lines(out)
    assert first["error"] == "the server reported an error mid-stream: engine died" and first["output"]
    assert second["error"].startswith("connection lost (")
    assert third["error"] is None


BAD_CHUNKS = {
    "nested-list": (b"data: " + b"[" * 100_000 + b"\n\n", "the chunk is nested too deeply"),
    "nested-object": (b"data: " + b'{"a":' * 100_000 + b"\n\n", "the chunk is nested too deeply"),
    "not-utf8": (b'data: {"a": "\xff"}\n\n', "the chunk is not valid JSON"),
    "over-16-MiB": (b'data: {"a": "' + b"x" * (17 * 1024 * 1024), "a stream line larger than 16 MiB"),
}


@pytest.mark.parametrize("name", BAD_CHUNKS)
def test_an_unreadable_chunk_fails_only_its_request(fake, tmp_path, name):
    chunk, reason = BAD_CHUNKS[name]
    fake.send_raw("/v1/completions", b'data: {"choices": [{"text": "Hi"}]}\n\n' + chunk + b"data: [DONE]\n\n")
    out = tmp_path / "out.jsonl"
    summary = run(BatchRunner(fake.base_url, model="tiny", concurrency=1).run(prompts(3, max_tokens=4), out))
    assert (summary.done, summary.failed) == (2, 1)
    first, *rest = lines(out)
    assert first["error"].startswith("the server sent a") and reason in first["error"] and first["output"] == "Hi"
    assert [r["error"] for r in rest] == [None, None] and rest[0]["output"].startswith("You said:")


def test_chunks_of_the_wrong_shape_are_ignored(fake, tmp_path):
    odd = b'data: {"choices": [5, {"text": 7}, {"delta": "x"}], "usage": 3}\n\n'
    fake.send_raw("/v1/completions", odd + b'data: {"choices": [{"text": "ok", "finish_reason": "stop"}]}\n\n')
    out = tmp_path / "out.jsonl"
    summary = run(BatchRunner(fake.base_url, model="tiny").run(prompts(1), out))
    assert summary.done == 1 and lines(out)[0]["output"] == "ok"


def test_a_nested_model_list_is_a_clear_error(fake, tmp_path):
    fake.send_raw("/v1/models", b'{"data": ' + b"[" * 100_000)
    with pytest.raises(BatchError, match=r"could not find the served model .*give the served model's name"):
        run(BatchRunner(fake.base_url).run(prompts(1), tmp_path / "o.jsonl"))


def test_a_server_that_is_down_is_a_clear_error(tmp_path):
    url = FakeOpenAIServer.unused_url()
    for model in (None, "tiny"):
        with pytest.raises(
            BatchError, match=rf"cannot reach the server at {url} \(ConnectError.*start it or check the address"
        ) as caught:
            run(BatchRunner(url, model=model).run(prompts(2), tmp_path / "o.jsonl"))
        assert (caught.value.kind, caught.value.setting) == (ErrorKind.UNAVAILABLE, "endpoint")
    assert (tmp_path / "o.jsonl").read_text() == ""


def test_a_server_that_dies_mid_batch_stops_the_batch_and_keeps_what_finished(fake, tmp_path):
    fake.token_delay_s = 0.01
    out = tmp_path / "out.jsonl"

    async def stop_server_midway():
        task = await _run_until_lines_on_disk(
            BatchRunner(fake.base_url, concurrency=2), prompts(30, max_tokens=4), out, 4
        )
        await asyncio.to_thread(fake.stop)
        return await task

    with pytest.raises(BatchError, match="cannot reach the server"):
        run(stop_server_midway())
    finished = [r for r in lines(out) if r["error"] is None]
    assert 4 <= len(finished) < 30


def test_no_served_model_is_a_clear_error(tmp_path):
    with FakeOpenAIServer(models=()) as fake, pytest.raises(BatchError, match="give the served model's name"):
        run(BatchRunner(fake.base_url).run(prompts(1), tmp_path / "o.jsonl"))


def test_an_unwritable_output_is_a_clear_error(fake, tmp_path):
    with pytest.raises(BatchError, match=r"cannot write .*choose another output file"):
        run(BatchRunner(fake.base_url).run(prompts(1), tmp_path / "no-such-folder" / "o.jsonl"))


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        (" http://gpu-box:8000/v1/ ", "http://gpu-box:8000"),
        ("https://api.example.com/proxy/v1", "https://api.example.com/proxy"),
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),  # as the vLLM page takes it (app/backends/server_url.py)
    ],
)
def test_endpoints_are_normalized(url, expected):
    assert BatchRunner(url).endpoint == expected


@pytest.mark.parametrize("url", ["ftp://host", "http://", "http://host:notaport", "http://:80"])
def test_bad_endpoints_are_refused(url):
    with pytest.raises(ValueError, match="is not an http:// or https:// address") as caught:
        BatchRunner(url)
    assert (caught.value.kind, caught.value.setting) == (ErrorKind.INVALID_INPUT, "endpoint")


def test_bad_runner_settings_are_refused():
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        BatchRunner("http://127.0.0.1:1", concurrency=0)
    with pytest.raises(ValueError, match="order must be"):
        BatchRunner("http://127.0.0.1:1", order="random")  # type: ignore[arg-type]
