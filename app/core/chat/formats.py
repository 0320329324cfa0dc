"""Choosing a llama.cpp chat format when a GGUF carries no chat template."""

from __future__ import annotations

from dataclasses import dataclass

# general.architecture prefix -> llama-cpp-python chat_format name
_FORMAT_BY_ARCH = (
    ("gemma", "gemma"),
    ("qwen", "chatml"),
    ("phi3", "chatml"),
    ("mistral", "mistral-instruct"),
    ("chatglm", "chatglm3"),
    ("baichuan", "baichuan-2"),
    ("llama", "llama-2"),
)
FALLBACK_FORMAT = "chatml"
# The app's own format for base models: the conversation as one running text, no turn markers, so the model
# continues what was written (Ollama's raw ``TEMPLATE {{ .Prompt }}``). Registered in the llama.cpp worker.
TEXT_CONTINUATION_FORMAT = "text-continuation"


@dataclass(frozen=True)
class ChatFormatChoice:
    """What the worker will pass as ``chat_format`` (None: use the GGUF's own template)."""

    chat_format: str | None
    reason: str

    @property
    def from_template(self) -> bool:
        return self.chat_format is None


def choose_chat_format(architecture: str | None, has_template: bool, requested: str | None = None) -> ChatFormatChoice:
    if requested == TEXT_CONTINUATION_FORMAT:
        return ChatFormatChoice(requested, "Text continuation: the model continues what you write (no chat turns).")
    if requested:
        return ChatFormatChoice(requested, f"Using the chat format '{requested}' that was asked for.")
    if has_template:
        return ChatFormatChoice(None, "Using the chat template stored in the model file.")
    arch = (architecture or "").lower()
    for prefix, name in _FORMAT_BY_ARCH:
        if arch.startswith(prefix):
            return ChatFormatChoice(
                name, f"This model has no chat template; using the '{name}' format for its architecture ({arch})."
            )
    return ChatFormatChoice(
        FALLBACK_FORMAT,
        f"This model has no chat template and its architecture ({arch or 'unknown'}) has no known format; "
        f"using '{FALLBACK_FORMAT}'. Choose another chat format if replies look wrong.",
    )
