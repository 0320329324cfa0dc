"""How to read a loaded model's replies, and which thinking switches it offers: the reply parser's configuration
from its chat template (thinking tags, whether the prompt opens the thinking block with the switches asked for)
and the tool-call format the llama.cpp worker prompts and constrains it to use. The GGUF's header is read once
per file (off the loop); ``ModelInfo.metadata`` keeps only a prefix of a long template. Which engine does what
is its ``EngineFacts`` (``parses_replies``, ``thinking_switches``), never its name.

Also what a chat's thinking choice becomes for the loaded model: only the switches its template (or engine)
offers are sent, so a model without them is asked nothing it would refuse."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import replace
from pathlib import Path

from app.backends.facts import ThinkingSwitches, facts_for
from app.backends.llamacpp.tool_calls import tool_call_format
from app.core.chat.reply_parser import ReplyParser
from app.core.chat.thinking import (
    NO_CONTROLS,
    ThinkingChoice,
    ThinkingControls,
    prompt_opens_thinking,
    template_variables,
    thinking_controls,
)
from app.core.chat.tool_formats import ReplyConfig, ReplyFormat, reply_format_for
from app.core.gguf.header import GgufFileError, read_gguf_header
from app.core.params import GenerationOptions
from app.services.engines.entries import EngineKind
from app.services.engines.host import EngineHost, LoadedModel

TOOL_FORMATS = {fmt.value: fmt for fmt in ReplyFormat}
OLLAMA_THINKING = ThinkingControls(toggle="think")  # Ollama's ``think`` field, for models with that capability


async def reply_parser(engine: EngineKind, loaded: LoadedModel | None, options: GenerationOptions) -> ReplyParser:
    """The parser for one chat reply of ``loaded`` on ``engine``. An engine that parses its replies (vLLM, Ollama)
    returns calls already parsed (and thinking apart, when its reasoning parser is on): its text is read for
    thinking tags only."""
    if facts_for(engine).parses_replies or loaded is None:
        return ReplyParser(ReplyConfig(ReplyFormat.NONE))
    template, architecture = await _gguf_template(loaded)
    config = reply_format_for(template, architecture)
    if template and config.think is not None:
        choice = ThinkingChoice(options.enable_thinking, options.reasoning_effort)
        variables = template_variables(thinking_controls(template), choice)
        opens = prompt_opens_thinking(template, config.think, variables)
        config = replace(config, prompt_opens_think=config.prompt_opens_think if opens is None else opens)
    tools = ReplyFormat.NONE
    if options.prompt_tools:  # the worker tells the model this format and forces it under a grammar
        tools = TOOL_FORMATS.get(tool_call_format(template, architecture).name, ReplyFormat.HERMES)
    return ReplyParser(replace(config, tools=tools))


async def thinking_controls_for(engine: EngineKind, loaded: LoadedModel | None) -> ThinkingControls:
    """The thinking switches the loaded model offers: from its GGUF template (llama.cpp), from its capabilities
    (Ollama); none known where the template is the server's (vLLM)."""
    switches = facts_for(engine).thinking_switches
    if loaded is None or switches is ThinkingSwitches.UNKNOWN:
        return NO_CONTROLS
    if switches is ThinkingSwitches.CAPABILITIES:
        capabilities = loaded.info.metadata.get("capabilities", "")
        return OLLAMA_THINKING if "thinking" in capabilities.split(", ") else NO_CONTROLS
    template, _architecture = await _gguf_template(loaded)
    return thinking_controls(template)


async def thinking_options(host: EngineHost, engine: EngineKind, choice: ThinkingChoice) -> GenerationOptions | None:
    """The request options for ``choice`` on the model loaded on ``engine``; None when nothing is to be asked."""
    if not choice.chosen:
        return None
    controls = await thinking_controls_for(engine, host.loaded(engine))
    enabled = choice.enabled if controls.toggle else None
    effort = choice.effort if controls.effort else None
    if enabled is None and effort is None:
        return None
    return GenerationOptions(enable_thinking=enabled, reasoning_effort=effort)


async def _gguf_template(loaded: LoadedModel) -> tuple[str | None, str | None]:
    """The GGUF template the model renders with (None for a built-in chat format), and its architecture."""
    template, architecture = await asyncio.get_running_loop().run_in_executor(
        None, _template, loaded.entry, _stamp(loaded.entry)
    )
    if loaded.params.chat_format is not None:
        template = None  # a built-in chat format replaces the GGUF's template
    return template, architecture


def _stamp(path: str) -> tuple[int, int]:
    try:
        stat = Path(path).stat()
    except OSError:
        return (0, 0)
    return (stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _template(path: str, _stamp: tuple[int, int]) -> tuple[str | None, str | None]:
    try:
        header = read_gguf_header(path)
    except (GgufFileError, OSError):
        return None, None
    return header.chat_template, header.architecture
