"""How a model is named across engines: ``ollama:NAME`` runs in Ollama, ``vllm:NAME`` on the vLLM server, and
anything else is a GGUF file for llama.cpp."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path


class EngineKind(StrEnum):
    LLAMACPP = "llamacpp"
    OLLAMA = "ollama"
    VLLM = "vllm"


OLLAMA_PREFIX = "ollama:"
VLLM_PREFIX = "vllm:"
_PREFIXES = {OLLAMA_PREFIX: EngineKind.OLLAMA, VLLM_PREFIX: EngineKind.VLLM}
ENGINE_LABELS = {EngineKind.LLAMACPP: "llama.cpp", EngineKind.OLLAMA: "Ollama", EngineKind.VLLM: "vLLM"}


def engine_prefix(entry: str) -> str | None:
    return next((prefix for prefix in _PREFIXES if entry.startswith(prefix)), None)


def engine_of(entry: str) -> EngineKind:
    prefix = engine_prefix(entry)
    return _PREFIXES[prefix] if prefix else EngineKind.LLAMACPP


def engine_model(entry: str) -> str:
    """The name the engine itself knows: the part after the prefix, or the file path."""
    prefix = engine_prefix(entry)
    return entry.removeprefix(prefix) if prefix else entry


def entry_for(kind: EngineKind, model: str) -> str:
    return model if kind is EngineKind.LLAMACPP else f"{kind}:{model}"


def display_name(entry: str) -> str:
    """A file shows as its name, an engine's model as its own name."""
    return engine_model(entry) if engine_prefix(entry) else Path(entry).name


def entry_label(entry: str) -> str:
    """``ollama:NAME`` shows as "Ollama · NAME", ``vllm:NAME`` as "vLLM · NAME", a file as its name."""
    kind = engine_of(entry)
    return display_name(entry) if kind is EngineKind.LLAMACPP else f"{ENGINE_LABELS[kind]} · {engine_model(entry)}"
