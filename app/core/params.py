"""Load and sampling parameters shared by every backend."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")

# GGML_TYPE_* ids used by llama.cpp for the KV cache types we offer.
GGML_TYPE_IDS = {"f16": 1, "q4_0": 2, "q8_0": 8}


@dataclass(frozen=True)
class LoadParams:
    """How a model is loaded. ``n_gpu_layers=None`` means "all layers if the build can offload"."""

    n_ctx: int = 4096
    n_gpu_layers: int | None = None
    n_threads: int | None = None
    n_batch: int = 512
    flash_attn: bool = False
    type_k: str = "f16"
    type_v: str = "f16"
    use_mmap: bool = True
    use_mlock: bool = False
    chat_format: str | None = None
    main_gpu: int = 0
    repeat_last_n: int = 64  # tokens the repeat penalty looks back over (llama.cpp: last_n_tokens_size)
    lora_path: str | None = None  # a GGUF LoRA adapter applied at load

    def problems(self) -> list[str]:
        """Human-readable reasons this combination cannot load, empty when it can."""
        found = []
        if self.n_ctx < 16:
            found.append("Context size must be at least 16 tokens.")
        for name in ("type_k", "type_v"):
            if getattr(self, name) not in KV_CACHE_TYPES:
                found.append(f"{name} must be one of {', '.join(KV_CACHE_TYPES)}.")
        if self.type_v != "f16" and not self.flash_attn:
            found.append("A quantized V cache needs flash attention: turn on flash attention or use f16 for V.")
        return found

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoadParams:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling options. ``seed=None`` means random; ``max_tokens=None`` fills the context."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    max_tokens: int | None = 512
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    typical_p: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stop"] = list(self.stop)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        known = _known(cls, data)
        if "stop" in known:
            known["stop"] = tuple(str(s) for s in known["stop"] or ())
        return cls(**known)


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}
