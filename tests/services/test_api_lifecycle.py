"""The API server's hold on models, observed in the engine host: a load on first use with the model's saved
settings, the idle time after which it unloads (and a request's ``keep_alive``/``ttl``), a client that leaves
mid-stream stopping the worker at once, and the bounded line for llama.cpp (503 OpenAI / 529 Anthropic).
The servers here run one request at a time (``n_parallel=1``): this is the single worker's part; the parallel
engine's is in test_api_parallel.
"""

from __future__ import annotations

import threading

import pytest

from app.core.params import LoadParams
from app.services.api.config import ServerConfig
from app.services.engines.entries import EngineKind
from app.services.engines.events import ModelLoaded, ModelUnloaded, ReplyFigures
from app.services.model_settings import ModelSettings
from tests.support.api_harness import ApiHarness
from tests.support.gguf_factory import write_tiny_gguf

pytestmark = pytest.mark.timeout(180)

HI = [{"role": "user", "content": "hello there"}]
LONG = 3000  # tokens: the never-ending model runs that long unless it is stopped


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-lifecycle")
    write_tiny_gguf(folder / "tiny-a.gguf", name="tiny-a")
    write_tiny_gguf(folder / "endless.gguf", name="endless", context_length=8192, never_eos=True)
    return folder


def _loads(api, kind=ModelLoaded):
    return [e for e in api.events if isinstance(e, kind)]


def test_a_model_loads_on_first_use_with_its_saved_settings_and_unloads_when_idle(folder, tmp_path):
    settings = tmp_path / "model-settings.json"
    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1, idle_ttl_s=0.6), settings_file=settings) as api:
        api.settings.set(str(folder / "tiny-a.gguf"), ModelSettings(load=LoadParams(n_ctx=1024)))
        assert api.host.loaded(EngineKind.LLAMACPP) is None
        api.openai().chat.completions.create(model="tiny-a", messages=HI, max_tokens=2)
        loaded = _loads(api)
        assert [e.entry for e in loaded] == [str(folder / "tiny-a.gguf")]
        assert loaded[0].params.n_ctx == 1024 and loaded[0].info.n_ctx == 1024  # its saved settings, on a JIT load
        assert api.wait_for(lambda: _loads(api, ModelUnloaded), 10)  # idle for 0.6 s: unloaded
        assert api.host.loaded(EngineKind.LLAMACPP) is None

        # keep_alive (Ollama's, on the OpenAI endpoint too): -1 keeps it; 0 unloads right after the request
        api.openai().chat.completions.create(model="tiny-a", messages=HI, max_tokens=2, extra_body={"keep_alive": -1})
        assert not api.wait_for(lambda: len(_loads(api, ModelUnloaded)) > 1, 1.2)
        api.anthropic().messages.create(model="tiny-a", max_tokens=2, messages=HI, extra_body={"keep_alive": "0s"})
        assert api.wait_for(lambda: len(_loads(api, ModelUnloaded)) == 2, 60)
        api.openai().chat.completions.create(model="tiny-a", messages=HI, max_tokens=2, extra_body={"ttl": 30})
        assert not api.wait_for(lambda: len(_loads(api, ModelUnloaded)) > 2, 1.2)  # ttl 30 s beats the 0.6 s


def test_a_jit_load_that_will_not_fit_is_refused_with_the_estimate_and_nothing_loads(folder, tmp_path):
    import openai

    settings = tmp_path / "model-settings.json"
    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1), settings_file=settings) as api:
        api.settings.set(str(folder / "tiny-a.gguf"), ModelSettings(load=LoadParams(n_ctx=999_999_999)))
        with pytest.raises(openai.BadRequestError) as refused:
            api.openai().chat.completions.create(model="tiny-a", messages=HI, max_tokens=2)
        message = refused.value.body["message"] if isinstance(refused.value.body, dict) else str(refused.value)
        assert "memory" in message.lower() or "fit" in message.lower(), message
        assert api.host.loaded(EngineKind.LLAMACPP) is None and not _loads(api)


def test_a_model_loaded_by_someone_else_stays_loaded(folder):
    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1, idle_ttl_s=0.2)) as api:
        api.run(api.host.load(str(folder / "tiny-a.gguf"), LoadParams(n_ctx=512)))
        api.openai().chat.completions.create(model="tiny-a", messages=HI, max_tokens=2)
        assert not api.wait_for(lambda: _loads(api, ModelUnloaded), 1.0)
        assert len(_loads(api)) == 1  # used as loaded (the window's), not loaded again


def test_a_client_that_leaves_mid_stream_stops_the_worker(folder):
    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1)) as api:
        stream = api.openai().chat.completions.create(model="endless", messages=HI, max_tokens=LONG, stream=True)
        pieces = 0
        for chunk in stream:
            pieces += bool(chunk.choices and chunk.choices[0].delta.content)
            if pieces == 3:
                break
        stream.close()
        assert api.wait_for(lambda: any(isinstance(e, ReplyFigures) for e in api.events), 10)
        figures = next(e for e in api.events if isinstance(e, ReplyFigures))
        assert figures.stats.finish_reason == "stopped"
        assert figures.stats.completion_tokens < LONG / 3  # stopped at the next token, not run to the end
        assert api.wait_for(lambda: api.host.llamacpp.state.kind == "ready", 60)
        record = api.wait_for(lambda: api.finished_records("chat.completions"), 5) and api.records[-1]
        assert record.status == 499 and "closed" in record.error
        again = api.openai().chat.completions.create(model="endless", messages=HI, max_tokens=3)
        assert again.usage.completion_tokens == 3  # the engine is free for the next request


def test_beyond_the_queue_limit_requests_are_refused_503_and_529(folder):
    import anthropic
    import openai

    with ApiHarness(folder, ServerConfig(port=0, n_parallel=1, max_queue=1)) as api:
        first = api.openai().chat.completions.create(model="endless", messages=HI, max_tokens=LONG, stream=True)
        next(iter(first))  # generating
        waiting_result: list[object] = []
        waiter = threading.Thread(target=lambda: waiting_result.append(
            api.openai().chat.completions.create(model="endless", messages=HI, max_tokens=2)
        ))  # fmt: skip
        waiter.start()
        assert api.wait_for(lambda: api.host.waiting(EngineKind.LLAMACPP) == 1, 10)  # one in line: the limit
        with pytest.raises(openai.APIStatusError) as refused:
            api.openai().chat.completions.create(model="endless", messages=HI, max_tokens=2)
        assert refused.value.status_code == 503 and "waiting" in refused.value.message
        with pytest.raises(anthropic.APIStatusError) as overloaded:
            api.anthropic().messages.create(model="endless", max_tokens=2, messages=HI)
        assert overloaded.value.status_code == 529
        assert overloaded.value.body["error"]["type"] == "overloaded_error"
        first.close()
        waiter.join(30)
        assert waiting_result and waiting_result[0].usage.completion_tokens == 2  # the one in line was served
        waited = [r for r in api.finished_records("chat.completions") if r.status == 200][-1]
        assert waited.wait_ms is not None and waited.wait_ms > 0  # the log shows the wait
