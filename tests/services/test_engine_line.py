"""One line per engine: a window load and an API request on the same llama.cpp model (the real worker, generated
GGUFs) wait in the engine host's one line. The API request runs on the model it asked for or waits for it —
never a 503 after it was admitted — and the window's load waits its place."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.core.params import LoadParams, SamplingParams
from app.services.api.config import ServerConfig
from app.services.engines.entries import EngineKind
from app.services.engines.events import LoadWaiting, ModelLoaded
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(180)

HI = [{"role": "user", "content": "hello there"}]
LLAMACPP = EngineKind.LLAMACPP


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("engine-line")
    write_tiny_gguf(folder / "tiny-a.gguf", name="tiny-a")
    write_tiny_gguf(folder / "endless.gguf", name="endless", context_length=8192, never_eos=True)
    return folder


@pytest.fixture
def api(folder):
    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1)) as harness:
        harness.run(harness.host.load(str(folder / "endless.gguf"), LoadParams(n_ctx=1024)))
        yield harness


def _window_reply(api):
    """A reply from the window's chat, generating on the loaded model (read up to its first token)."""

    async def begin():
        reply = api.host.stream_chat(LLAMACPP, HI, SamplingParams(max_tokens=3000, temperature=0.0))
        await reply.__anext__()
        return reply

    return api.run(begin())


def _ask_in_background(api, model: str) -> tuple[threading.Thread, list[object]]:
    answers: list[object] = []

    def ask() -> None:
        try:
            answers.append(api.openai().chat.completions.create(model=model, messages=HI, max_tokens=3))
        except Exception as exc:  # the assertion reads it
            answers.append(exc)

    thread = threading.Thread(target=ask)
    thread.start()
    return thread, answers


def _loads(api) -> list[str]:
    return [e.entry for e in api.events if isinstance(e, ModelLoaded)]


def test_a_window_load_behind_an_admitted_request_waits_and_the_request_runs_on_its_model(api, folder):
    endless, other = str(folder / "endless.gguf"), str(folder / "tiny-a.gguf")
    window = _window_reply(api)
    thread, answers = _ask_in_background(api, "endless")
    assert api.wait_for(lambda: api.host.waiting(LLAMACPP) == 1, 30)  # admitted: its place in the line
    load = asyncio.run_coroutine_threadsafe(api.host.load(other, LoadParams(n_ctx=512)), api.background.loop)
    assert api.wait_for(lambda: any(isinstance(e, LoadWaiting) and e.replies_ahead == 2 for e in api.events), 30)
    api.run(window.aclose())  # the window's reply ends: the request's turn
    thread.join(60)
    assert len(answers) == 1 and not isinstance(answers[0], Exception), answers  # never a 503 "model_switched"
    assert answers[0].usage.completion_tokens == 3
    load.result(60)
    assert _loads(api) == [endless, other]  # the window's load came after the request, not between
    assert api.host.loaded(LLAMACPP).entry == other
    record = api.wait_for(lambda: api.finished_records("chat.completions"), 5) and api.records[-1]
    assert record.status == 200 and record.model == "endless" and record.load_ms is None


def test_a_request_behind_a_window_load_waits_and_loads_its_model_again(api, folder):
    endless, other = str(folder / "endless.gguf"), str(folder / "tiny-a.gguf")
    window = _window_reply(api)
    load = asyncio.run_coroutine_threadsafe(api.host.load(other, LoadParams(n_ctx=512)), api.background.loop)
    assert api.wait_for(lambda: api.host.waiting(LLAMACPP) == 1, 30)
    thread, answers = _ask_in_background(api, "endless")
    assert api.wait_for(lambda: api.host.waiting(LLAMACPP) == 2, 30)  # behind the load
    api.run(window.aclose())
    load.result(60)
    thread.join(60)
    assert len(answers) == 1 and not isinstance(answers[0], Exception), answers
    assert answers[0].usage.completion_tokens == 3
    assert _loads(api) == [endless, other, endless]  # its own model, loaded again in its turn
    record = api.wait_for(lambda: api.finished_records("chat.completions"), 5) and api.records[-1]
    assert record.status == 200 and record.load_ms is not None
