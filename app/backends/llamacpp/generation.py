"""Opening a reply on a loaded ``Llama`` the way a request asks: the chat rendered by the model's own chat
handler (tools shown to it, in its template or else in the system prompt), sampled under the app's grammar, with
llama-cpp-python's own ``response_format`` / ``tool_choice`` handling kept out of the way; a raw text
completion; and a chat's prompt-token count, rendered exactly as the chat would be.

The chat handler is driven through a stand-in for the model (``_Steered``): the handler renders and tokenizes
the prompt as usual (or, when thinking switches are asked for, a handler that renders the GGUF template with them:
``templates.variables_handler``), and its ``create_completion`` call is answered with the app's grammar and without
llama-cpp-python's logprobs (which need ``logits_all``; see ``logprobs``). Only the worker imports this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from app.backends.llamacpp import continuation, grammars, templates
from app.backends.llamacpp.tool_calls import ToolCallFormat, template_messages, with_tool_instructions
from app.core.params import GenerationOptions


def open_chat(
    llm: Any, messages: list[dict[str, Any]], sampling: dict[str, Any], options: GenerationOptions,
    fmt: ToolCallFormat,
) -> Iterator[dict[str, Any]]:  # fmt: skip
    """The chat-completion chunks of the reply (``stream=True``); raises GrammarError before any token."""
    grammar = grammar_for(llm, options, fmt)
    handler = templates.variables_handler(llm, options)
    tools = options.prompt_tools
    prompt = prompt_messages(llm, messages, tools, fmt, handler)
    steered = _Steered(llm, grammar, handler)
    return continuation.open_chat_stream(steered, prompt, **sampling, **_tool_kwargs(options))


def open_completion(
    llm: Any, prompt: str, sampling: dict[str, Any], options: GenerationOptions, fmt: ToolCallFormat
) -> Iterator[dict[str, Any]]:
    """The text-completion chunks continuing ``prompt`` (no chat template)."""
    grammar = grammar_for(llm, options, fmt)
    return llm.create_completion(prompt=prompt, stream=True, grammar=grammar, **sampling)


def count_chat_tokens(
    llm: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, fmt: ToolCallFormat
) -> int:
    """The prompt tokens a chat with these messages and tools would start from."""
    options = GenerationOptions(tools=tools or None)
    return len(_rendered(llm, prompt_messages(llm, messages, options.prompt_tools, fmt), _tool_kwargs(options)))


def grammar_for(llm: Any, options: GenerationOptions, fmt: ToolCallFormat) -> Any:
    """The ``LlamaGrammar`` for ``options`` (None for free text), built and parsed before generation starts."""
    text = grammars.request_grammar(options, fmt)
    if text is None:
        return None
    grammars.check_parses(llm, text)
    from llama_cpp.llama_grammar import LlamaGrammar

    return LlamaGrammar.from_string(text, verbose=False)


def prompt_messages(
    llm: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, fmt: ToolCallFormat,
    handler: Any = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """``messages`` ready for the template; when it ignores ``tools``, the tools go into the system prompt."""
    ready = template_messages(messages)
    if not tools:
        return ready
    with_tools = _rendered(llm, ready, {"tools": tools, "tool_choice": "auto"}, handler)
    if with_tools != _rendered(llm, ready, {}, handler):
        return ready  # the template shows the tools itself
    return with_tool_instructions(ready, tools, fmt)


def _tool_kwargs(options: GenerationOptions) -> dict[str, Any]:
    """What the template is told: the tools, and "required" when a call is forced (never a named-function
    dict: llama-cpp-python would then replace the app's grammar and turn the reply into its own call)."""
    tools = options.prompt_tools
    if not tools:
        return {}
    return {"tools": tools, "tool_choice": "required" if options.tool_mode in ("required", "named") else "auto"}


def _rendered(llm: Any, messages: list[dict[str, Any]], kwargs: dict[str, Any], handler: Any = None) -> list[int]:
    """The prompt tokens the chat handler makes of ``messages`` (nothing is generated)."""
    probe = _Rendering(llm, handler)
    continuation.open_chat_stream(probe, messages, **kwargs)
    return probe.prompt


class _StandIn:
    """The model, as the chat handler sees it (every attribute but the ones overridden is the model's);
    ``handler`` replaces the model's chat handler."""

    def __init__(self, llm: Any, handler: Any = None) -> None:
        self._llm = llm
        if handler is not None:
            self.chat_handler = handler

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_chat_completion(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        """As ``Llama.create_chat_completion``, with this stand-in as the model the handler drives."""
        from llama_cpp import llama_chat_format

        llm = self._llm
        handler: Any = (
            self.chat_handler
            or llm._chat_handlers.get(llm.chat_format)
            or llama_chat_format.get_chat_completion_handler(llm.chat_format)
        )
        return handler(llama=self, messages=messages, **kwargs)


class _Steered(_StandIn):
    def __init__(self, llm: Any, grammar: Any, handler: Any = None) -> None:
        super().__init__(llm, handler)
        self._grammar = grammar

    def create_completion(self, prompt: Any, **kwargs: Any) -> Any:
        kwargs["grammar"] = self._grammar
        kwargs["logprobs"] = None  # recorded by the app (see logprobs.py)
        return self._llm.create_completion(prompt=prompt, **kwargs)


class _Rendering(_StandIn):
    def __init__(self, llm: Any, handler: Any = None) -> None:
        super().__init__(llm, handler)
        self.prompt: list[int] = []

    def create_completion(self, prompt: Any, **_kwargs: Any) -> Iterator[dict[str, Any]]:
        self.prompt = list(prompt)
        return iter(())
