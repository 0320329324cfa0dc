"""Every page and sub-tab by the name ``--screenshot --page`` and the tests use (Qt-free, so the command line can
check a name before Qt starts): name → (top-level page, tab or None)."""

from __future__ import annotations

PAGE_PATHS: dict[str, tuple[str, str | None]] = {
    "chat": ("Chat", None),
    "models": ("Models", "Library"),
    "models/library": ("Models", "Library"),
    "models/discover": ("Models", "Discover"),
    "models/downloads": ("Models", "Downloads"),
    "models/ollama": ("Models", "Ollama"),
    "modelfiles": ("Modelfiles", None),
    "batch": ("Batch", "vLLM server"),
    "batch/vllm": ("Batch", "vLLM server"),
    "batch/runner": ("Batch", "Batch runner"),
    "bench": ("Bench", None),
    "monitor": ("Monitor", None),
    "server": ("Server", None),
    "settings": ("Settings", None),
}
