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
    "vllm": ("vLLM", None),
    "batch": ("Batch", None),
    "batch/vllm": ("vLLM", None),  # the vLLM page was Batch's first tab: the old names still open it
    "batch/runner": ("Batch", None),
    "bench": ("Bench", None),
    "documents": ("Documents", None),
    "monitor": ("Monitor", None),
    "server": ("API server", None),
    "settings": ("Settings", None),
}

# Names that open the same page as another name (a screenshot of each page skips these).
ALIASES = frozenset({"models", "batch/vllm", "batch/runner"})
