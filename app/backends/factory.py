"""Create an engine's backend by kind, importing its module only then (so ``protocol`` imports no backend)."""

from __future__ import annotations

from typing import Any

from app.backends.protocol import Backend, BackendError


def create_backend(kind: str, **options: Any) -> Backend:
    if kind == "llamacpp":
        from app.backends.llamacpp.backend import LlamaCppBackend

        return LlamaCppBackend(**options)
    if kind == "ollama":
        from app.backends.ollama import OllamaBackend

        return OllamaBackend(**options)
    if kind == "vllm":
        from app.backends.vllm import VllmBackend

        return VllmBackend(**options)
    raise BackendError(f"Unknown engine '{kind}'. Known engines: llamacpp, ollama, vllm.")
