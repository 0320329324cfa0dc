"""Benchmarks: the app's llama.cpp path against raw llama-cpp-python, measured in the same run."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from app.backends.llamacpp.backend import LlamaCppBackend
from app.backends.llamacpp.engine import sampling_kwargs
from app.backends.llamacpp.repack import NO_REPACK_ENV, model_params_without_repacking, repacking_disabled
from app.core.chat.formats import choose_chat_format
from app.core.gguf.header import read_gguf_header
from app.core.params import LoadParams, SamplingParams
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost
from app.services.paths import app_paths

# Distinct openings so that neither path reuses the other run's prompt cache.
BENCH_PROMPTS = (
    "Tell me a long story about a lighthouse keeper who finds a map.",
    "Describe, step by step, how bread is baked in a village bakery.",
    "Write a travel diary of a week spent walking along a mountain ridge.",
    "Explain how rivers shape valleys over thousands of years, in detail.",
    "Give a detailed account of a day in the life of a city librarian.",
    "Narrate the history of an old clock tower and the people around it.",
    "Write a long letter from a sailor to his family describing the ocean.",
    "Describe a busy market at dawn, stall by stall, with its sounds and smells.",
)


@dataclass
class Sample:
    ttft_ms: float
    decode_tokens_per_s: float
    completion_tokens: int


@dataclass
class PathSummary:
    label: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def ttft_ms(self) -> float:
        return statistics.median(s.ttft_ms for s in self.samples)

    @property
    def decode_tokens_per_s(self) -> float:
        return statistics.median(s.decode_tokens_per_s for s in self.samples)


def _decode_rate(tokens: int, first: float, last: float) -> float:
    return (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0


class RawPath:
    """llama-cpp-python in this process, with exactly the worker's settings."""

    def __init__(self, model: str, load: LoadParams, no_repack: bool = False) -> None:
        import llama_cpp

        from app.backends.llamacpp.engine import LlamaEngine

        header = read_gguf_header(model)
        choice = choose_chat_format(header.architecture, header.chat_template is not None, load.chat_format)
        offload = bool(llama_cpp.llama_supports_gpu_offload())
        n_gpu_layers = load.n_gpu_layers if load.n_gpu_layers is not None else (-1 if offload else 0)
        kwargs = LlamaEngine.llama_kwargs(load, n_gpu_layers, choice.chat_format)
        with model_params_without_repacking(no_repack):
            self.llm = llama_cpp.Llama(model_path=model, **kwargs)

    def run(self, prompt: str, sampling: SamplingParams) -> Sample:
        started = time.perf_counter()
        first = last = 0.0
        finish = None
        chunks = 0
        stream = self.llm.create_chat_completion(
            messages=[{"role": "user", "content": prompt}], stream=True, **sampling_kwargs(sampling)
        )
        for chunk in stream:
            choice: Any = chunk["choices"][0]  # type: ignore[index]
            if choice["delta"].get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
                chunks += 1
            finish = choice.get("finish_reason") or finish
        # A reply that ran to max_tokens has exactly max_tokens tokens; otherwise count streamed pieces.
        tokens = sampling.max_tokens if finish == "length" and sampling.max_tokens else chunks
        return Sample((first - started) * 1000, _decode_rate(tokens, first, last), tokens)

    def close(self) -> None:
        self.llm.close()


def repacking_off_here() -> bool:
    """Whether the app's worker runs without llama.cpp's repacking on this machine (its kernels crashed here)."""
    return repacking_disabled() or app_paths().llama_kernel_fallback.exists()


async def _app_run(host: EngineHost, prompt: str, sampling: SamplingParams) -> Sample:
    reply = host.stream_chat(EngineKind.LLAMACPP, [{"role": "user", "content": prompt}], sampling)
    async for _ in reply:
        pass
    stats = reply.stats
    assert stats is not None and stats.ttft_ms is not None
    return Sample(stats.ttft_ms, stats.decode_tokens_per_s or 0.0, stats.completion_tokens)


async def bench_chat(model: str, load: LoadParams, max_tokens: int, runs: int) -> dict[str, Any]:
    """Alternate raw and app runs on the same prompts and settings; report medians and ratios. The app's path is
    the one the window, the CLI and the API take: the engine host, its llama.cpp worker process."""
    no_repack = repacking_off_here()
    if no_repack:  # as the app's worker runs here: llama.cpp's repacked kernels crashed on this machine
        os.environ[NO_REPACK_ENV] = "1"
    host = EngineHost(LlamaCppBackend())
    await host.load(model, load)
    raw = RawPath(model, load, no_repack)
    app_path, raw_path = PathSummary("app (engine host, worker process)"), PathSummary("raw llama-cpp-python")
    try:
        for index in range(runs + 1):  # run 0 warms both up and is not counted
            prompt = BENCH_PROMPTS[index % len(BENCH_PROMPTS)]
            sampling = SamplingParams(max_tokens=max_tokens, seed=1234 + index, temperature=0.8)
            raw_sample = raw.run(prompt, sampling)
            app_sample = await _app_run(host, prompt, sampling)
            if index:
                raw_path.samples.append(raw_sample)
                app_path.samples.append(app_sample)
    finally:
        raw.close()
        await host.close()
    return _report(model, load, max_tokens, app_path, raw_path)


def _report(model: str, load: LoadParams, max_tokens: int, app: PathSummary, raw: PathSummary) -> dict[str, Any]:
    return {
        "model": model,
        "n_ctx": load.n_ctx,
        "max_tokens": max_tokens,
        "runs": len(app.samples),
        "app": {"decode_tokens_per_s": app.decode_tokens_per_s, "ttft_ms": app.ttft_ms},
        "raw": {"decode_tokens_per_s": raw.decode_tokens_per_s, "ttft_ms": raw.ttft_ms},
        "decode_ratio": app.decode_tokens_per_s / raw.decode_tokens_per_s if raw.decode_tokens_per_s else None,
        "ttft_overhead_ms": app.ttft_ms - raw.ttft_ms,
        "samples": {"app": [asdict(s) for s in app.samples], "raw": [asdict(s) for s in raw.samples]},
    }
