"""Thinking (reasoning) models: the switches a chat template offers, what a chat's choice becomes as template
variables, whether the prompt opens the thinking block, and one reply's thinking and answer split from an engine's
pieces with their own duration and token count.

Templates are read with ``jinja2.meta`` (no rendering) for the switches; ``prompt_opens_thinking`` renders a tiny
chat in a sandbox, as llama-cpp-python does. Nothing here imports an engine.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.core.chat.tool_formats import ThinkTags

TOGGLE_VARIABLES = ("enable_thinking", "thinking")  # Qwen3, GLM, Hunyuan, SmolLM3 / DeepSeek-V3.1, Granite
EFFORT_VARIABLE = "reasoning_effort"  # gpt-oss and others
HISTORY_FIELD = "reasoning_content"  # a template that shows earlier thinking reads it from assistant messages


@dataclass(frozen=True)
class ThinkingControls:
    """What a chat template lets a chat choose: ``toggle`` names its on/off variable, ``effort`` its effort one;
    ``reads_history`` when it shows an assistant message's ``reasoning_content`` (earlier thinking)."""

    toggle: str | None = None
    effort: str | None = None
    reads_history: bool = False

    @property
    def any(self) -> bool:
        return bool(self.toggle or self.effort)


@dataclass(frozen=True)
class ThinkingChoice:
    """A chat's choice: ``enabled`` None leaves the template's default; ``effort`` one of ``REASONING_EFFORTS``
    or None (the template's default)."""

    enabled: bool | None = None
    effort: str | None = None

    @property
    def chosen(self) -> bool:
        return self.enabled is not None or self.effort is not None


NO_CONTROLS = ThinkingControls()


def thinking_controls(template: str | None) -> ThinkingControls:
    """The thinking switches ``template`` reads (none for no template, or one that does not parse)."""
    if not template:
        return NO_CONTROLS
    return _controls(template)


@functools.lru_cache(maxsize=16)
def _controls(template: str) -> ThinkingControls:
    import jinja2
    from jinja2 import meta

    try:
        names = meta.find_undeclared_variables(_environment(sandboxed=False).parse(template))
    except jinja2.TemplateError:
        return NO_CONTROLS
    toggle = next((name for name in TOGGLE_VARIABLES if name in names), None)
    effort = EFFORT_VARIABLE if EFFORT_VARIABLE in names else None
    return ThinkingControls(toggle, effort, HISTORY_FIELD in template)


def template_variables(controls: ThinkingControls, choice: ThinkingChoice) -> dict[str, Any]:
    """The variables a template is rendered with for ``choice`` (only those it reads)."""
    variables: dict[str, Any] = {}
    if controls.toggle and choice.enabled is not None:
        variables[controls.toggle] = choice.enabled
    if controls.effort and choice.effort is not None:
        variables[controls.effort] = choice.effort
    return variables


def prompt_opens_thinking(template: str, tags: ThinkTags, variables: dict[str, Any]) -> bool | None:
    """Whether the generation prompt ends inside an open thinking block with these ``variables`` (the reply then
    starts thinking and shows only the closing tag); None when the template cannot be rendered here."""
    return _opens(template, tags, tuple(sorted(variables.items())))


@functools.lru_cache(maxsize=64)
def _opens(template: str, tags: ThinkTags, variables: tuple[tuple[str, Any], ...]) -> bool | None:
    try:
        prompt = render_template(template, [{"role": "user", "content": "Hi"}], dict(variables))
    except Exception:  # a template that needs more than this probe: the caller falls back to reading it
        return None
    return prompt.rstrip().endswith(tags.open)


def render_template(
    template: str, messages: list[dict[str, Any]], variables: dict[str, Any], *, bos_token: str = "",
    eos_token: str = "", tools: list[dict[str, Any]] | None = None, tool_choice: Any = None,
) -> str:  # fmt: skip
    """Render a chat template as llama-cpp-python's ``Jinja2ChatFormatter`` does (sandboxed, the same globals and
    ``add_generation_prompt=True``), with ``variables`` added (``enable_thinking``, ``reasoning_effort`` …)."""
    compiled = _compiled(template)

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    return compiled.render(
        messages=messages, eos_token=eos_token, bos_token=bos_token, raise_exception=raise_exception,
        add_generation_prompt=True, functions=None, function_call=None, tools=tools, tool_choice=tool_choice,
        strftime_now=_strftime_now, **variables,
    )  # fmt: skip


@functools.lru_cache(maxsize=8)
def _compiled(template: str) -> Any:
    return _environment(sandboxed=True).from_string(template)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment(*, sandboxed: bool) -> Any:
    """The Jinja environment of llama-cpp-python (and Transformers) for chat templates."""
    import json

    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class IgnoreGenerationTags(jinja2.ext.Extension):
        """Pass-through for HuggingFace's ``{% generation %}`` tag."""

        tags = {"generation"}  # noqa: RUF012 (jinja2.ext.Extension declares it so)

        def parse(self, parser: Any) -> Any:
            parser.stream.skip(1)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    kind = ImmutableSandboxedEnvironment if sandboxed else jinja2.Environment
    environment = kind(
        loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True,
        extensions=[IgnoreGenerationTags, jinja2.ext.loopcontrols],
    )  # fmt: skip

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
               sort_keys: bool = False) -> str:  # fmt: skip
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    environment.filters["tojson"] = tojson
    return environment
