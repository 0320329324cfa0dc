"""How big a bench the page proposes, and how long a workload should take, before Run.

The default suits the engine and the machine: llama.cpp or Ollama on a CPU runs one stream of a few hundred
tokens a second at best, so a run of about a minute there is 12 requests of up to 64 tokens; with a GPU, or on
vLLM (which batches), the full 64 × 128. The time is a rough estimate: decoding reads every weight once per token,
so its speed is about the memory bandwidth over the model's size (a measured speed, when the page has one for
this model, replaces the guess).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.bench.workload import BenchWorkload

CPU_BYTES_PER_S = 10e9  # what a CPU reads from RAM per second while decoding, roughly (laptop to desktop: 8-40)
GPU_BYTES_PER_S = 300e9  # a consumer GPU's VRAM, roughly
# Prompt tokens go in batches, this many times faster than generated ones. Measured for Gemma 3 270M Q4_K_M on a
# shared 2-core CPU: decoding ~45 tok/s, prompts ~150 tok/s; 12 × 64 tokens took 45 s (estimated: 40 s).
PREFILL_SPEEDUP = 3.0
TOKENS_PER_WORD = 1.3
BATCHING_ENGINES = frozenset({"vllm"})  # concurrent requests share each step; the others mostly queue


@dataclass(frozen=True)
class WorkloadSize:
    requests: int
    max_tokens: int


SMALL = WorkloadSize(requests=12, max_tokens=64)  # about a minute for a small model on a CPU
FULL = WorkloadSize(requests=BenchWorkload().requests, max_tokens=BenchWorkload().max_tokens)
PROPOSALS = frozenset({SMALL, FULL})


def default_size(kind: str, has_gpu: bool) -> WorkloadSize:
    """The workload the page proposes for this engine on this machine."""
    return FULL if kind in BATCHING_ENGINES or has_gpu else SMALL


def guessed_tokens_per_s(model_bytes: int, has_gpu: bool) -> float:
    """One stream's decode speed, guessed from the model's size: the bandwidth over the bytes read per token."""
    return (GPU_BYTES_PER_S if has_gpu else CPU_BYTES_PER_S) / max(model_bytes, 1)


def mean_prompt_tokens(workload: BenchWorkload) -> float:
    words = sum(w * p for w, p in zip(workload.prompt_words, workload.prompt_weights, strict=True))
    return words * TOKENS_PER_WORD


def estimated_seconds(workload: BenchWorkload, kind: str, tokens_per_s: float, measured: bool = False) -> float:
    """The whole run at ``tokens_per_s`` per stream: each level's requests (and warm-up), every reply at its
    longest; a batching engine runs a level's requests side by side. A ``measured`` speed (output tokens over
    the whole request) already counts the prompts' time."""
    prompts = 0.0 if measured else mean_prompt_tokens(workload) / (tokens_per_s * PREFILL_SPEEDUP)
    one = workload.max_tokens / tokens_per_s + prompts
    total = 0.0
    for level in workload.concurrencies:
        side_by_side = level if kind in BATCHING_ENGINES else 1
        total += (workload.requests + workload.warmup) * workload.repetitions * one / side_by_side
    return total


def estimate_text(workload: BenchWorkload, seconds: float | None, measured: bool) -> str:
    """``About 1 min (a guess from the model's size): 12 requests of up to 64 tokens at concurrency 1.``"""
    levels = ", ".join(str(level) for level in workload.concurrencies)
    what = f"{workload.requests} requests of up to {workload.max_tokens} tokens at concurrency {levels}"
    if seconds is None:
        return f"{what[:1].upper()}{what[1:]}."
    source = "from the last run of this model" if measured else "a guess from the model's size"
    return f"About {_about(seconds)} ({source}): {what}."


def _about(seconds: float) -> str:
    """``20 s`` under a minute and a half, then whole minutes, then hours with one decimal."""
    if seconds < 90:
        return f"{max(5, round(seconds / 5) * 5)} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"
