"""Checks on load settings before llama.cpp sees them: will the context fit this machine's memory, and is it
beyond what the model was trained on."""

from __future__ import annotations

from dataclasses import replace

from app.core.gguf.header import GgufFileError, GgufHeader, read_gguf_header
from app.core.memory.estimate import EstimateSettings, estimate_memory
from app.core.memory.fit import WONT_FIT, MachineMemory, fit_verdict, largest_fitting_ctx
from app.core.params import LoadParams
from app.core.speculative import DRAFT, parse_speculative
from app.core.units import format_bytes


def estimate_settings(params: LoadParams) -> EstimateSettings:
    """The memory estimate's view of ``params`` (all layers offloaded when the count is left to the engine)."""
    return EstimateSettings(
        n_ctx=params.n_ctx,
        n_gpu_layers=-1 if params.n_gpu_layers is None else params.n_gpu_layers,
        type_k=params.type_k,
        type_v=params.type_v,
        n_batch=params.n_batch,
        n_ubatch=min(params.n_batch, 512),  # llama-cpp-python's n_ubatch default, capped by n_batch
        flash_attn=params.flash_attn,
    )


def memory_refusal(header: GgufHeader, params: LoadParams, machine: MachineMemory) -> str | None:
    """Why the context in ``params`` cannot load on ``machine`` by the memory estimate, with its numbers; None
    when it may fit, or when the estimate cannot judge this model (llama.cpp then decides).

    Only the context is judged: a model whose weights alone exceed free memory at the smallest context is left
    to llama.cpp (memory-mapped weights can still run, slowly) unless its KV cache alone exceeds all memory.
    With a GPU, a load that does not fit as asked but fits in RAM with no layers offloaded is not refused
    either: a CPU-only build of llama.cpp runs it that way, and a GPU build's failure names the context."""
    settings = replace(estimate_settings(params), draft=draft_header(params))
    try:
        verdict = fit_verdict(header, settings, machine)
        if verdict.state != WONT_FIT:
            return None
        offloads = bool(machine.gpu_free_bytes) and settings.n_gpu_layers != 0
        if offloads and fit_verdict(header, replace(settings, n_gpu_layers=0), machine).state != WONT_FIT:
            return None
        kv_bytes = estimate_memory(header, settings).kv_cache_bytes
        context_at_fault = largest_fitting_ctx(header, settings, machine) is not None
    except (GgufFileError, ValueError, TypeError):
        return None
    if not context_at_fault and kv_bytes <= machine.ram_available_bytes + sum(machine.gpu_free_bytes):
        return None
    return (
        f"A context of {params.n_ctx:,} tokens will not fit in this machine's memory "
        f"(its KV cache alone needs {format_bytes(kv_bytes)}). {verdict.summary} " + " ".join(verdict.suggestions)
    )


def draft_header(params: LoadParams) -> GgufHeader | None:
    """The header of the draft model ``params`` speculates with (it joins the memory estimate); None without one,
    or when it cannot be read (the load then says why). Reads the file: call it off the UI thread."""
    try:
        setting = parse_speculative(params.speculative)
        return read_gguf_header(setting.draft_path) if setting.mode == DRAFT and setting.draft_path else None
    except (ValueError, GgufFileError, OSError):
        return None


def context_beyond_training(n_ctx: int, n_ctx_train: int | None) -> str | None:
    """A warning when the context is larger than the model's trained context (legitimate with RoPE scaling)."""
    if not n_ctx_train or n_ctx <= n_ctx_train:
        return None
    return (
        f"The context ({n_ctx:,} tokens) is larger than the {n_ctx_train:,} tokens this model was trained on: "
        f"replies may degrade past {n_ctx_train:,} tokens unless the model is meant to be stretched (RoPE scaling)."
    )
