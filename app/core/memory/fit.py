"""Will this model fit? A verdict from the memory estimate against the machine's free memory, with the change
that would make it fit (a smaller context, a q8_0 KV cache, fewer GPU layers), found by search, not canned."""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.core.gguf.header import GgufHeader
from app.core.memory.estimate import EstimateSettings, MemoryEstimate, estimate_memory, model_shape
from app.core.units import format_bytes

FITS, TIGHT, WONT_FIT = "fits", "tight", "wont_fit"
HEADROOM = 0.10  # under 10% left over is "tight": other programs, fragmentation and the driver need room
_MIN_CTX = 256


@dataclass(frozen=True)
class MachineMemory:
    gpu_names: tuple[str, ...]
    gpu_free_bytes: tuple[int, ...]
    gpu_total_bytes: tuple[int, ...]
    ram_total_bytes: int
    ram_available_bytes: int
    gpu_unavailable_reason: str | None
    cpu_amx: bool = False  # llama.cpp keeps AMX copies of host weights on this CPU (see EstimateSettings.cpu_amx)


@dataclass(frozen=True)
class FitVerdict:
    state: str  # "fits" | "tight" | "wont_fit"
    summary: str
    suggestions: tuple[str, ...]
    needed_bytes: int
    available_bytes: int

    def to_dict(self) -> dict[str, object]:
        return {
            "state": self.state,
            "summary": self.summary,
            "suggestions": list(self.suggestions),
            "needed_bytes": self.needed_bytes,
            "available_bytes": self.available_bytes,
        }


NO_GPU_NOTE = "no GPU here: everything runs from RAM"


def on_this_machine(settings: EstimateSettings, machine: MachineMemory) -> EstimateSettings:
    """``settings`` as llama.cpp applies them on ``machine``: AMX copies when its CPU uses AMX, and without a GPU
    every layer on the host whatever n_gpu_layers asks."""
    if settings.cpu_amx != machine.cpu_amx:
        settings = replace(settings, cpu_amx=machine.cpu_amx)
    return settings if machine.gpu_free_bytes or settings.n_gpu_layers == 0 else replace(settings, n_gpu_layers=0)


def _state(estimate: MemoryEstimate, machine: MachineMemory) -> tuple[str, int, int, str]:
    """(state, needed, available, where) for the tighter of GPU and host memory."""
    gpu_free = sum(machine.gpu_free_bytes)
    checks = [(estimate.host_bytes, machine.ram_available_bytes, "system RAM")]
    if estimate.gpu_bytes:
        checks.append((estimate.gpu_bytes, gpu_free, "free VRAM"))
    rank = {FITS: 0, TIGHT: 1, WONT_FIT: 2}
    results = []
    for needed, available, where in checks:
        state = WONT_FIT if needed > available else TIGHT if needed > available * (1 - HEADROOM) else FITS
        results.append((state, needed, available, where))
    return max(results, key=lambda result: rank[result[0]])


def fit_verdict(header: GgufHeader, settings: EstimateSettings, machine: MachineMemory) -> FitVerdict:
    """fits / tight / wont_fit for ``settings`` on ``machine``, with computed suggestions when not "fits".

    On a machine without a GPU the whole load is judged against system RAM (as llama.cpp runs it there), and on
    a CPU with AMX with llama.cpp's AMX weight copies (``on_this_machine``)."""
    settings = on_this_machine(settings, machine)
    estimate = estimate_memory(header, settings)
    state, needed, available, where = _state(estimate, machine)
    words = {FITS: "Fits", TIGHT: "Tight fit", WONT_FIT: "Won't fit"}
    summary = f"{words[state]}: needs {format_bytes(needed)} of {format_bytes(available)} {where}"
    if estimate.gpu_bytes and where != "free VRAM":
        summary += f" ({format_bytes(estimate.gpu_bytes)} on the GPU)"
    elif not machine.gpu_free_bytes:
        summary += f" ({NO_GPU_NOTE})"
    summary += "."
    suggestions = () if state == FITS else tuple(_suggestions(header, settings, machine))
    return FitVerdict(state, summary, suggestions, needed, available)


def _fits(header: GgufHeader, settings: EstimateSettings, machine: MachineMemory) -> bool:
    return _state(estimate_memory(header, on_this_machine(settings, machine)), machine)[0] == FITS


def _suggestions(header: GgufHeader, settings: EstimateSettings, machine: MachineMemory) -> list[str]:
    found = []
    if (ctx := largest_fitting_ctx(header, settings, machine)) is not None and ctx < settings.n_ctx:
        found.append(f"Lower the context to {ctx:,} tokens (n_ctx).")
    if settings.type_k == "f16" or settings.type_v == "f16":
        q8 = replace(settings, type_k="q8_0", type_v="q8_0", flash_attn=True)
        if _fits(header, q8, machine):
            found.append("Use a q8_0 KV cache (with flash attention): it halves the cache.")
    for ubatch in (256, 128, 64, 32):
        if ubatch < settings.n_ubatch and _fits(header, replace(settings, n_ubatch=ubatch), machine):
            found.append(f"Use a smaller micro-batch, n_ubatch={ubatch}: the compute buffer shrinks with it.")
            break
    if machine.gpu_free_bytes and settings.n_gpu_layers != 0:
        layers = most_fitting_gpu_layers(header, settings, machine)
        if layers is not None:
            found.append(f"Offload {layers} layers to the GPU (n_gpu_layers={layers}); the rest run on the CPU.")
    if not found:
        found.append("No setting makes it fit here: choose a smaller quantization or a smaller model.")
    return found


def largest_fitting_ctx(header: GgufHeader, settings: EstimateSettings, machine: MachineMemory) -> int | None:
    """The largest n_ctx (a multiple of 256, at most the requested one) that fits, by bisection."""
    low, high = _MIN_CTX, max(settings.n_ctx, _MIN_CTX)
    if not _fits(header, replace(settings, n_ctx=low), machine):
        return None
    while high - low > _MIN_CTX:
        middle = (low + high) // 2 // _MIN_CTX * _MIN_CTX
        if middle <= low:
            break
        if _fits(header, replace(settings, n_ctx=middle), machine):
            low = middle
        else:
            high = middle
    return high if _fits(header, replace(settings, n_ctx=high), machine) else low


def most_fitting_gpu_layers(header: GgufHeader, settings: EstimateSettings, machine: MachineMemory) -> int | None:
    """The most layers (0..n_layer+1) that can go to the GPU with everything fitting, or None."""
    n_layer = model_shape(header).n_layer
    requested = n_layer + 1 if settings.n_gpu_layers < 0 else min(settings.n_gpu_layers, n_layer + 1)
    for layers in range(requested - 1, -1, -1):
        if _fits(header, replace(settings, n_gpu_layers=layers), machine):
            return layers
    return None
