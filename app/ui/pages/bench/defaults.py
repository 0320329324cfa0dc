"""What the Bench page proposes for each engine: concurrency levels that suit it, and the model it has loaded."""

from __future__ import annotations

from pathlib import Path

from app.services.engines.entries import EngineKind, engine_model
from app.services.engines.host import EngineHost

# llama.cpp runs one stream (its clients queue), unless N sequences share one context ("parallel"); Ollama
# serves a few at once by default; vLLM batches many.
DEFAULT_CONCURRENCY = {
    "llamacpp": "1",
    "llamacpp-parallel": "1,2,4",
    "vllm": "1,8,16,32,64",
    "ollama": "1,2,4",
}
ENGINE_NAMES = {"llamacpp": "llama.cpp", "vllm": "vLLM", "ollama": "Ollama"}


def default_concurrency(kind: str, parallel: bool = False) -> str:
    return DEFAULT_CONCURRENCY["llamacpp-parallel" if kind == "llamacpp" and parallel else kind]


def is_a_default(text: str) -> bool:
    """Whether ``text`` is empty or one of the defaults (then another engine's default may replace it)."""
    return text.replace(" ", "") in ("", *DEFAULT_CONCURRENCY.values())


def loaded_model(host: EngineHost, kind: str) -> str | None:
    """The model that engine has loaded now, as the Bench page's model field takes it (a GGUF path for
    llama.cpp, the name for Ollama, the served name for vLLM); None when it has none."""
    if kind == "vllm":
        return host.vllm_endpoint.served_model if host.vllm_endpoint else None
    loaded = host.loaded(EngineKind(kind))
    return engine_model(loaded.entry) if loaded else None


def model_name(kind: str, model: str) -> str:
    """How the empty state names the model: a GGUF by its file name."""
    return Path(model).name if kind == "llamacpp" else model
