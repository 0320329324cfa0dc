"""The Monitor's lines for 2026's engine figures: speculative acceptance (vLLM from ``/metrics``, llama.cpp from the
last reply), vLLM's host KV tier (with a host swap figure that is a lower bound) and prompt tokens cached by source.

Pure text from a reading: each function returns None when the engine reports nothing of the kind.
"""

from __future__ import annotations

from app.core.chat.conversation import ReplyStats
from app.core.monitor.snapshot import KvReading
from app.core.units import format_byte_rate, format_bytes

SPEC_MODES = {"ngram": "n-gram lookup", "draft": "draft model"}
SWAP_NOTE = "a lower bound: the bytes vLLM reports moving to and from host memory"


def vllm_speculation_line(kv: KvReading) -> str | None:
    """``vLLM speculative decoding: 77% of drafted tokens accepted · 3.3 tokens per step``."""
    if kv.spec_acceptance_rate is None:
        return None
    line = f"vLLM speculative decoding: {kv.spec_acceptance_rate:.0%} of drafted tokens accepted"
    if kv.spec_mean_accepted_length is not None:
        line += f" · {kv.spec_mean_accepted_length:.1f} tokens per step"
    return line


def host_tier_line(kv: KvReading) -> str | None:
    """The host KV tier: its size, bytes stored and loaded (and their rates), and host swap bytes (a lower bound)."""
    store, load = kv.host_tier_store_bytes_total, kv.host_tier_load_bytes_total
    if kv.host_tier_capacity_bytes is None and store is None and load is None:
        return None
    size = "" if kv.host_tier_capacity_bytes is None else f" of {format_bytes(kv.host_tier_capacity_bytes)}"
    moved = (
        f"stored {format_bytes(store)} ({format_byte_rate(kv.host_tier_store_bytes_per_s)}) · "
        f"loaded {format_bytes(load)} ({format_byte_rate(kv.host_tier_load_bytes_per_s)})"
    )
    swap = f"host swap ≥ {format_bytes(kv.host_swap_bytes_lower_bound)} ({SWAP_NOTE})"
    return f"vLLM host KV tier{size}: {moved} · {swap}"


def cached_sources_line(kv: KvReading) -> str | None:
    """``Prompt tokens served from cache: device 1,200 · host 300`` (sources with none left out)."""
    if not kv.cached_prompt_tokens_by_source:
        return None
    hits = [f"{source} {tokens:,.0f}" for source, tokens in kv.cached_prompt_tokens_by_source if tokens > 0]
    return "Prompt tokens served from cache: " + (" · ".join(hits) if hits else "none yet")


def llama_speculation_line(stats: ReplyStats | None) -> str | None:
    """``llama.cpp speculative decoding (n-gram lookup), last reply: 62% of 80 drafted tokens accepted``."""
    if stats is None or not stats.spec_mode:
        return None
    mode = SPEC_MODES.get(stats.spec_mode, stats.spec_mode)
    if not stats.spec_drafted:
        return f"llama.cpp speculative decoding ({mode}), last reply: nothing was drafted"
    rate = stats.spec_accepted / stats.spec_drafted
    return (
        f"llama.cpp speculative decoding ({mode}), last reply: {rate:.0%} of {stats.spec_drafted:,} "
        "drafted tokens accepted"
    )


def engine_figure_lines(vllm: KvReading | None, llama_reply: ReplyStats | None) -> list[str]:
    """Every line there is something to say for, in a stable order."""
    lines = [llama_speculation_line(llama_reply)]
    if vllm is not None:
        lines += [vllm_speculation_line(vllm), host_tier_line(vllm), cached_sources_line(vllm)]
    return [line for line in lines if line]
