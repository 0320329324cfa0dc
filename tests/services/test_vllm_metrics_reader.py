"""The one reader of vLLM's /metrics over HTTP, against FakeOpenAIServer (real HTTP) and an address nobody serves."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.core.errors import ErrorKind
from app.services.vllm.metrics import BlockingMetricsReader, MetricsUnavailableError, metrics_summary, read_metrics
from app.services.vllm.remote import RemoteError, probe_remote
from tests.support.fake_openai import FakeOpenAIServer


def test_the_async_and_the_blocking_reader_give_the_same_figures() -> None:
    with FakeOpenAIServer(models=("tiny-llama",)) as fake:
        metrics = asyncio.run(read_metrics(fake.base_url))
        reader = BlockingMetricsReader()
        try:
            page = reader.page(fake.base_url + "/")
        finally:
            reader.close()
    assert (metrics.num_gpu_blocks, metrics.block_size_tokens, metrics.requests_running) == (27000, 16, 0)
    assert "vllm:kv_cache_usage_perc" in page
    summary = metrics_summary(metrics)
    assert summary.startswith("KV cache ") and "of 27,000 blocks × 16 tokens (432,000 tokens)" in summary


def test_a_shared_client_is_used_and_left_open() -> None:
    async def main():
        with FakeOpenAIServer() as fake:
            async with httpx.AsyncClient(base_url=fake.base_url, trust_env=False) as client:
                first = await read_metrics(fake.base_url, client=client)
                second = await read_metrics(fake.base_url, client=client)
                assert not client.is_closed
            return first, second

    first, second = asyncio.run(main())
    assert first.num_gpu_blocks == second.num_gpu_blocks == 27000


def test_failures_are_unavailable_errors_in_words() -> None:
    url = FakeOpenAIServer.unused_url()
    with pytest.raises(MetricsUnavailableError, match=f"Nothing answers at {url}") as caught:
        asyncio.run(read_metrics(url))
    assert caught.value.kind is ErrorKind.UNAVAILABLE
    with FakeOpenAIServer() as fake:
        fake.metrics_page = "<html>a proxy's error page</html>"
        with pytest.raises(MetricsUnavailableError, match="not Prometheus text from vLLM"):
            asyncio.run(read_metrics(fake.base_url))


def test_probe_remote_errors_speak_the_app_vocabulary() -> None:
    with FakeOpenAIServer(api_key="right") as fake:
        with pytest.raises(RemoteError, match="refused the API key") as refused:
            asyncio.run(probe_remote(fake.base_url, "wrong"))
        assert refused.value.kind is ErrorKind.UNAVAILABLE and refused.value.setting == "api_key"
        assert asyncio.run(probe_remote(fake.base_url, "right")) == (fake.base_url, ["tiny-llama"])
    with pytest.raises(RemoteError, match="Nothing answers at") as down:
        asyncio.run(probe_remote(FakeOpenAIServer.unused_url(), None))
    assert down.value.setting == "endpoint"
