"""What each engine does itself, fixed per engine: the app reads these facts where it would otherwise compare engine
names. One line per engine in ``ENGINE_FACTS``; each backend class carries its own as ``facts``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ThinkingSwitches(StrEnum):
    """Where a loaded model's thinking switches (on/off, effort) are known from."""

    TEMPLATE = "template"  # the model's GGUF chat template (llama.cpp renders it)
    CAPABILITIES = "capabilities"  # the engine reports the model's capabilities (Ollama's "thinking")
    UNKNOWN = "unknown"  # the template lives on the server (vLLM): none are offered


@dataclass(frozen=True)
class EngineFacts:
    """``reads_image_files``: the engine reads a message's attached images from their files (llama.cpp's worker);
    otherwise they are sent inline. ``parses_replies``: the engine separates tool calls (and thinking, with its
    reasoning parser) itself; otherwise its text holds them, read by the reply parser in the model's GGUF format.
    ``strict_tools``: tools are offered with ``strict`` schemas, which the server holds calls to. ``continues_replies``:
    it goes on with a reply it left unfinished (its chat API continues the last assistant message).
    ``loads_models``: the app loads the model with its load settings; otherwise the server loaded it when it started
    (vLLM), so load settings, a preset's load part and idle unloads do not apply, and sampling a client leaves
    unset is left to the server (the model's generation defaults)."""

    reads_image_files: bool = False
    parses_replies: bool = True
    thinking_switches: ThinkingSwitches = ThinkingSwitches.UNKNOWN
    strict_tools: bool = False
    continues_replies: bool = True
    loads_models: bool = True


LLAMACPP_FACTS = EngineFacts(reads_image_files=True, parses_replies=False, thinking_switches=ThinkingSwitches.TEMPLATE)
OLLAMA_FACTS = EngineFacts(thinking_switches=ThinkingSwitches.CAPABILITIES)
VLLM_FACTS = EngineFacts(strict_tools=True, continues_replies=False, loads_models=False)
ENGINE_FACTS = {"llamacpp": LLAMACPP_FACTS, "ollama": OLLAMA_FACTS, "vllm": VLLM_FACTS}


def facts_for(kind: str) -> EngineFacts:
    """The facts of the engine ``kind`` ("llamacpp", "ollama", "vllm"), whether or not one exists now."""
    return ENGINE_FACTS[kind]
