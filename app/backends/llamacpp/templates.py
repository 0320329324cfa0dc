"""A GGUF's chat template as llama-cpp-python uses it, inside the worker: which chat formats exist, whether the
template that will be used compiles and renders in the sandbox, and readable words for its errors.

llama-cpp-python compiles every template stored in a GGUF when ``Llama`` is created (a syntax error surfaces at
load, even when another chat format was asked for) and renders the chosen one per request (a sandbox
``SecurityError`` surfaces at the first chat). ``jinja2`` and ``llama_cpp`` are imported on first use.
"""

from __future__ import annotations

import difflib
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from app.core.chat.thinking import ThinkingChoice, render_template, template_variables, thinking_controls
from app.core.params import GenerationOptions

ADVICE = "choose another chat format, or fix or replace the template"
_DEFAULT_KEY = "tokenizer.chat_template"
_DEFAULT_FORMAT = "chat_template.default"  # llama-cpp-python's name for the GGUF's own template
_PROBE: list[Any] = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hello"}]


def chat_formats(metadata: Mapping[str, Any]) -> list[str]:
    """Every chat format name llama-cpp-python accepts for this model: its registered formats plus the
    templates stored in the GGUF (``chat_template.default``, ``chat_template.<name>``)."""
    from llama_cpp import llama_chat_format

    registry = llama_chat_format.LlamaChatCompletionHandlerRegistry()
    names = set(getattr(registry, "_chat_handlers", {}))
    names.update(key[len("tokenizer.") :] for key in metadata if key.startswith(_DEFAULT_KEY + "."))
    if metadata.get(_DEFAULT_KEY):
        names.add(_DEFAULT_FORMAT)
    return sorted(names)


def unknown_format_message(requested: str, known: list[str]) -> str:
    close = difflib.get_close_matches(requested, known, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return f"Unknown chat format '{requested}'.{hint} Valid formats: {', '.join(known)}."


def template_in_use(requested: str | None, metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    """(label, text) of the GGUF template a load with chat format ``requested`` will render, if any."""
    if requested is None or requested == _DEFAULT_FORMAT:
        key, label = _DEFAULT_KEY, "the model's chat template"
    elif requested.startswith("chat_template."):
        key, label = "tokenizer." + requested, f"the model's '{requested.split('.', 1)[1]}' chat template"
    else:
        return None
    text = metadata.get(key)
    return (label, str(text)) if text else None


def template_problem(label: str, template: str) -> str | None:
    """Compile ``template`` and render a small conversation the way llama-cpp-python does; the reason it cannot
    work (a syntax error, an operation the sandbox blocks), or None. Failures that depend on the messages
    (``raise_exception``, a missing variable) are left to the chat, which names them as template errors too."""
    import jinja2
    from jinja2.sandbox import SecurityError
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    try:
        Jinja2ChatFormatter(template=template, eos_token="", bos_token="")(messages=_PROBE)
    except (jinja2.TemplateSyntaxError, SecurityError) as exc:
        return describe_template_error(exc, label)
    except Exception:  # depends on the messages: the chat reports it
        return None
    return None


def describe_template_error(exc: BaseException, label: str = "the model's chat template") -> str | None:
    """Readable words for an error raised by a chat template, or None when ``exc`` did not come from one."""
    import jinja2
    from jinja2.sandbox import SecurityError

    subject = label[0].upper() + label[1:]
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return f"{subject} has a syntax error at line {exc.lineno}: {exc.message}; {ADVICE}."
    if isinstance(exc, SecurityError):
        return f"{subject} tried an unsafe operation, which the sandbox blocked ({str(exc).rstrip('.')}); {ADVICE}."
    if isinstance(exc, jinja2.TemplateError) or _raised_in_template(exc):
        return f"{subject} failed on these messages ({type(exc).__name__}: {exc}); {ADVICE}."
    return None


def _raised_in_template(exc: BaseException) -> bool:
    """Jinja runs compiled templates as code whose file name is ``<template>``."""
    return any(frame.f_code.co_filename == "<template>" for frame, _ in traceback.walk_tb(exc.__traceback__))


@contextmanager
def tolerant_templates() -> Iterator[None]:
    """While ``Llama`` is created, a GGUF template that does not compile no longer stops the load: the error is
    kept and raised only if that template is rendered. So a model with a broken template still loads with
    another chat format (the load checks the template it will use itself, with :func:`template_problem`)."""
    import jinja2
    from llama_cpp import llama_chat_format

    original = llama_chat_format.Jinja2ChatFormatter

    class TolerantFormatter(llama_chat_format.Jinja2ChatFormatter):
        def __init__(self, template: str, *args: Any, **kwargs: Any) -> None:
            self.broken: jinja2.TemplateError | None = None
            try:
                super().__init__(template, *args, **kwargs)
            except jinja2.TemplateError as exc:
                self.broken = exc

        def __call__(self, **kwargs: Any) -> Any:
            if self.broken is not None:
                raise self.broken.with_traceback(None)
            return super().__call__(**kwargs)

    llama_chat_format.Jinja2ChatFormatter = TolerantFormatter  # type: ignore[misc]
    try:
        yield
    finally:
        llama_chat_format.Jinja2ChatFormatter = original  # type: ignore[misc]


def variables_handler(llm: Any, options: GenerationOptions) -> Any | None:
    """A chat handler that renders the model's GGUF template with the thinking switches ``options`` ask for
    (``enable_thinking``, ``reasoning_effort`` …, only those the template reads), which llama-cpp-python's own
    handler never passes; None when there is nothing to pass or the model uses no GGUF template (a built-in chat
    format, or a handler of its own)."""
    if llm.chat_handler is not None or not (options.enable_thinking is not None or options.reasoning_effort):
        return None
    in_use = template_in_use(llm.chat_format, llm.metadata)
    if in_use is None:
        return None
    template = in_use[1]
    choice = ThinkingChoice(options.enable_thinking, options.reasoning_effort)
    variables = template_variables(thinking_controls(template), choice)
    if not variables:
        return None
    from llama_cpp import llama_chat_format

    formatter: Any = _VariablesFormatter(llm, template, variables)
    return llama_chat_format.chat_formatter_to_chat_completion_handler(formatter)


class _VariablesFormatter:
    """A GGUF template rendered as ``Jinja2ChatFormatter`` renders it (the same sandbox, globals, BOS/EOS text and
    stop on EOS), plus ``variables``."""

    def __init__(self, llm: Any, template: str, variables: dict[str, Any]) -> None:
        eos_id, bos_id = llm.token_eos(), llm.token_bos()
        self._template = template
        self._variables = variables
        self._eos_id = eos_id
        self._eos = llm._model.token_get_text(eos_id) if eos_id != -1 else ""
        self._bos = llm._model.token_get_text(bos_id) if bos_id != -1 else ""

    def __call__(self, *, messages: list[dict[str, Any]], tools: Any = None, tool_choice: Any = None,
                 **_ignored: Any) -> Any:  # fmt: skip
        import llama_cpp
        from llama_cpp import llama_chat_format

        prompt = render_template(self._template, messages, self._variables, bos_token=self._bos, eos_token=self._eos,
                                 tools=tools, tool_choice=tool_choice)  # fmt: skip
        eos_id = self._eos_id

        def stop_on_eos(tokens: Any, _logits: Any) -> bool:
            return bool(tokens[-1] == eos_id)

        return llama_chat_format.ChatFormatterResponse(
            prompt=prompt, stop=[self._eos], stopping_criteria=llama_cpp.StoppingCriteriaList([stop_on_eos]),
            added_special=True,
        )  # fmt: skip
