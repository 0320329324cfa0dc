"""OllamaService against the fake Ollama server, through the official client over real HTTP."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading

import pytest

from app.backends.ollama import DEFAULT_HOST, resolve_host
from app.core.errors import ErrorKind
from app.services.ollama.client import OllamaError, OllamaService, PullProgress
from tests.support.fake_ollama import FakeOllama


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture
def fake():
    before = set(threading.enumerate())
    with FakeOllama() as server:
        yield server
    assert not server.handler_errors
    assert not [t for t in threading.enumerate() if t not in before and t.is_alive()]


async def _with_service(host, action):
    service = OllamaService(host)
    try:
        return await action(service)
    finally:
        await service.close()


# --- hosts ----------------------------------------------------------------------------------------------------
def test_host_comes_from_settings_then_environment_then_default(monkeypatch):
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    assert resolve_host("") == DEFAULT_HOST == "http://127.0.0.1:11434"
    monkeypatch.setenv("OLLAMA_HOST", "0.0.0.0:9999")  # how servers are told to listen everywhere
    assert resolve_host(None) == "http://127.0.0.1:9999"
    assert resolve_host("  http://gpu-box:8080/ ") == "http://gpu-box:8080"
    assert resolve_host("https://user:secret@ollama.lan") == "https://ollama.lan:443"
    assert resolve_host(":5000") == "http://127.0.0.1:5000"
    assert resolve_host("[::]:11434") == "http://[::1]:11434"


def test_a_broken_host_setting_is_a_readable_error(monkeypatch):
    with pytest.raises(OllamaError, match=r"not a valid address.*Fix the Ollama host\.$") as caught:
        OllamaService("http://user:secret@localhost:notaport")
    assert "secret" not in str(caught.value)
    assert (caught.value.kind, caught.value.setting) == (ErrorKind.INVALID_INPUT, "host")
    with pytest.raises(OllamaError, match=r"http:// or https://"):
        OllamaService("ftp://localhost")


# --- status ---------------------------------------------------------------------------------------------------
def test_status_running_reports_the_version(fake):
    status = run(_with_service(fake.host, lambda s: s.status()))
    assert status.running and status.version == "0.12.6" and status.host == fake.host
    assert "0.12.6" in status.summary()
    assert [r.path for r in fake.requests] == ["/api/version"]


def test_status_not_running_is_a_calm_line_not_an_exception():
    host = FakeOllama.unused_host()
    status = run(_with_service(host, lambda s: s.status()))
    assert not status.running and status.version is None
    assert status.reason == f"Ollama is not running at {host}: start it with `ollama serve`."
    assert "\n" not in status.reason


def test_status_after_the_server_stops(fake):
    async def scenario(service):
        first = await service.status()
        fake.stop()
        return first, await service.status()

    first, second = run(_with_service(fake.host, scenario))
    assert first.running and not second.running and "ollama serve" in second.reason


def test_status_of_a_server_that_is_not_ollama(fake):
    fake.version = None
    status = run(_with_service(fake.host, lambda s: s.status()))
    assert not status.running and "HTTP 404" in status.reason and "not Ollama" in status.reason


NESTED = (b"[" * 100_000, b'{"a":' * 100_000)


@pytest.mark.parametrize("body", NESTED)
def test_status_of_a_server_answering_nested_json_is_not_ollama(fake, body):
    fake.send_raw("/api/version", body)
    status = run(_with_service(fake.host, lambda s: s.status()))
    assert not status.running and "not Ollama" in status.reason


@pytest.mark.parametrize("body", NESTED)
def test_nested_answers_are_readable_errors_and_the_service_keeps_working(fake, body):
    fake.add_model("llama3.2")
    fake.add_remote("qwen3:0.6b", [100])
    fake.send_raw("/api/tags", body)  # read by the official client (json.loads: a RecursionError)
    fake.send_raw("/api/show", body)  # read by request_json
    fake.send_raw("/api/pull", b'{"status": "pulling manifest"}\n' + body + b"\n")  # an NDJSON line

    async def scenario(service):
        errors = []
        for call in (service.list_models(), service.show("llama3.2"), service.pull("qwen3:0.6b", lambda p: None)):
            with pytest.raises(OllamaError) as caught:
                await call
            errors.append(str(caught.value))
        return errors, await service.list_models()

    errors, models = run(_with_service(fake.host, scenario))
    assert all("sent a reply this app cannot read" in e and "nested too deeply" in e for e in errors), errors
    assert "while listing models" in errors[0] and "while reading llama3.2" in errors[1]
    assert "while pulling qwen3:0.6b" in errors[2] and fake.model("qwen3:0.6b") is None
    assert [m.name for m in models] == ["llama3.2:latest"]


def test_proxy_settings_in_the_environment_are_not_used(fake, monkeypatch):
    dead = FakeOllama.unused_host()
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, dead)
    monkeypatch.setenv("NO_PROXY", "")
    assert run(_with_service(fake.host, lambda s: s.status())).running


# --- listings -------------------------------------------------------------------------------------------------
def test_list_and_running_models(fake):
    fake.add_model("llama3.2", size=2_019_393_189, parameter_size="3.2B")
    fake.add_model("qwen3:0.6b", family="qwen3")
    fake.vram_fraction = 0.75
    fake.load("qwen3:0.6b", num_ctx=8192)

    async def scenario(service):
        return await service.list_models(), await service.running_models()

    models, running = run(_with_service(fake.host, scenario))
    by_name = {m.name: m for m in models}
    assert set(by_name) == {"llama3.2:latest", "qwen3:0.6b"}
    assert by_name["llama3.2:latest"].size == 2_019_393_189
    assert by_name["llama3.2:latest"].parameter_size == "3.2B"
    assert by_name["qwen3:0.6b"].family == "qwen3" and by_name["qwen3:0.6b"].format == "gguf"
    [loaded] = running
    assert loaded.name == "qwen3:0.6b" and loaded.context_length == 8192
    assert loaded.size_vram == int(loaded.size * 0.75) and loaded.vram_fraction == pytest.approx(0.75, abs=1e-6)
    assert loaded.expires_at


def test_listing_when_not_running_raises_a_readable_error():
    host = FakeOllama.unused_host()
    with pytest.raises(OllamaError, match=r"Ollama is not running at .*ollama serve"):
        run(_with_service(host, lambda s: s.list_models()))


# --- pull -----------------------------------------------------------------------------------------------------
def _pull(fake, name):
    seen: list[PullProgress] = []

    async def scenario(service):
        await service.pull(name, seen.append)

    return seen, run(_with_service(fake.host, scenario))


def test_pull_reports_bytes_across_layers_and_ends_with_success(fake):
    fake.add_remote("qwen3:0.6b", [4000, 120, 12])
    seen, _ = _pull(fake, "qwen3:0.6b")
    statuses = [p.status for p in seen]
    assert statuses[0] == "pulling manifest"
    assert statuses[-4:] == ["verifying sha256 digest", "writing manifest", "removing unused layers", "success"]
    layers = [p for p in seen if p.digest]
    assert all(p.status == f"pulling {p.digest[7:19]}" for p in layers)
    assert layers[0].completed == 0 and layers[0].total == 4000  # Ollama omits completed while it is 0
    assert [p.completed for p in seen] == sorted(p.completed for p in seen)
    assert seen[-1].completed == seen[-1].total == 4132 and seen[-1].done and seen[-1].fraction == 1.0
    assert not any(p.done for p in seen[:-1])
    raw = fake.requests_to("/api/pull")[0].json
    assert raw == {"model": "qwen3:0.6b", "insecure": False, "stream": True}
    assert fake.model("qwen3:0.6b") is not None

    again, _ = _pull(fake, "qwen3:0.6b")  # cached layers: one line each with completed == total
    layer_lines = [p for p in again if p.digest]
    assert len(layer_lines) == 3 and again[-1].done


def test_pull_error_line_mid_stream_raises_and_registers_nothing(fake):
    fake.add_remote("llama3.2", [1000])
    fake.fail("/api/pull", error="max retries exceeded: unexpected EOF", after=3)
    seen: list[PullProgress] = []

    async def scenario(service):
        with pytest.raises(OllamaError, match=r"max retries exceeded: unexpected EOF") as caught:
            await service.pull("llama3.2", seen.append)
        return caught.value, await service.list_models()

    error, models = run(_with_service(fake.host, scenario))
    assert len(seen) == 3 and not any(p.done for p in seen)
    assert models == [] and fake.model("llama3.2") is None
    assert "pulling llama3.2" in str(error)


@pytest.mark.parametrize("how", ["error line", "consumer raises"])
def test_a_stream_ended_early_is_closed_at_once_not_by_the_garbage_collector(fake, monkeypatch, how):
    """qasync's loop installs no async-generator hooks: a half-read httpx stream would be finalized by the
    garbage collector there, reporting "async generator ignored GeneratorExit" (an unraisable error)."""
    fake.add_remote("llama3.2", [1000, 10])
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append((u.exc_value, u.object)))
    lines: list[dict] = []

    def on_line(line):
        lines.append(line)
        if how == "consumer raises" and len(lines) == 2:
            raise ValueError("bad line")

    if how == "error line":
        fake.fail("/api/pull", error="max retries exceeded: unexpected EOF", after=2)
    expected = "unexpected EOF" if how == "error line" else "went wrong while pulling llama3.2: bad line"

    async def scenario(service):
        sys.set_asyncgen_hooks(firstiter=None, finalizer=None)  # as under qasync
        with pytest.raises(OllamaError, match=expected):
            await service.stream_json("/api/pull", {"model": "llama3.2"}, "pulling llama3.2", on_line)
        if how == "error line":  # the official client's pull stream leaks the same way: pull does not use it
            fake.fail("/api/pull", error="max retries exceeded: unexpected EOF", after=2)
            with pytest.raises(OllamaError, match=expected):
                await service.pull("llama3.2", lambda p: None)
        gc.collect()
        return (await service.status()).running  # the client is still usable

    assert run(_with_service(fake.host, scenario)) is True
    gc.collect()
    assert len(lines) == 2
    assert unraisable == []
    if how == "error line":  # a consumer's failure only hangs up: the fake may finish that pull regardless
        assert fake.model("llama3.2") is None


def test_server_dying_mid_pull_raises_and_registers_nothing(fake):
    fake.add_remote("llama3.2", [1000, 10])
    fake.fail("/api/pull", die=True, after=4)
    seen: list[PullProgress] = []

    async def scenario(service):
        await service.pull("llama3.2", seen.append)

    with pytest.raises(OllamaError, match=r"connection to Ollama .* was lost while pulling llama3.2"):
        run(_with_service(fake.host, scenario))
    assert len(seen) == 4 and not any(p.done for p in seen)
    assert fake.model("llama3.2") is None


def test_pull_of_an_unknown_model_names_the_library(fake):
    with pytest.raises(OllamaError, match=r"could not find nosuchmodel.*ollama.com/library"):
        _pull(fake, "nosuchmodel")


def test_pull_when_not_running_and_with_no_name():
    host = FakeOllama.unused_host()
    with pytest.raises(OllamaError, match=r"Ollama is not running at"):
        run(_with_service(host, lambda s: s.pull("llama3.2", lambda p: None)))
    with pytest.raises(OllamaError, match=r"Enter the name"):
        run(_with_service(host, lambda s: s.pull("  ", lambda p: None)))


# --- delete / show --------------------------------------------------------------------------------------------
def test_delete(fake):
    fake.add_model("llama3.2")

    async def scenario(service):
        await service.delete("llama3.2")
        with pytest.raises(OllamaError, match=r"no model named 'llama3.2'"):
            await service.delete("llama3.2")
        return await service.list_models()

    assert run(_with_service(fake.host, scenario)) == []
    assert [r.json for r in fake.requests_to("/api/delete", "DELETE")] == [{"model": "llama3.2"}] * 2


def test_show_keeps_the_fields_the_official_client_drops(fake):
    fake.add_model(
        "helper",
        system="You are terse.",
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        parameters={"temperature": 0.2, "num_ctx": 8192, "stop": ["<|eot|>", "</s>"]},
        license=["MIT", "Apache-2.0"],
        requires="0.12.0",
        renderer="qwen3-coder",
        parser="qwen3-coder",
    )
    details = run(_with_service(fake.host, lambda s: s.show("helper")))
    assert details.system == "You are terse."
    assert details.messages == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert details.requires == "0.12.0" and details.renderer == details.parser == "qwen3-coder"
    assert details.license == "MIT\nApache-2.0"
    assert details.architecture == "llama" and details.context_length == 131072
    assert 'stop                           "<|eot|>"' in details.parameters.splitlines()
    assert "num_ctx                        8192" in details.parameters.splitlines()

    with pytest.raises(OllamaError, match=r"no model named 'missing'"):
        run(_with_service(fake.host, lambda s: s.show("missing")))
