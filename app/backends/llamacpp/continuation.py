"""Continuing text in the llama.cpp worker: the text-continuation chat format for base models, and continuing an
unfinished reply (a chat whose last message is the assistant's is continued, not answered: llama-server's
"assistant prefill" convention).

A continued reply is rendered by the model's own chat handler with a marker as the last message's content; the
prompt is cut at the marker and the unfinished reply put in its place, so the model goes on inside that same
turn. Templates that drop or rewrite the assistant's text cannot be continued, and say so.

Only the worker imports this module; ``llama_cpp`` is imported on first use.
"""

from __future__ import annotations

import functools
from typing import Any

from app.core.chat.formats import TEXT_CONTINUATION_FORMAT
from app.core.errors import InvalidInputError

_MARKER = "\ue000llmw-continue\ue001"  # private-use characters: no template or reply produces them
TURN_BREAK = "\n\n"  # between a reply and the next message, in the text-continuation format


class ContinuationError(InvalidInputError):
    """The chat template cannot continue a reply (it dropped or rewrote the unfinished text)."""


def continuation_text(messages: list[dict[str, Any]]) -> str:
    """The conversation as one running text: the system prompt, then each message; a reply follows the text it
    continues directly, and the next message starts after a blank line."""
    parts: list[str] = []
    previous = ""
    for message in messages:
        content = str(message.get("content") or "")
        role = message.get("role")
        if role == "system":
            parts.append(content + TURN_BREAK if content.strip() else "")
        elif role == "assistant" or previous != "assistant":
            parts.append(content)
        else:
            parts.append(TURN_BREAK + content)
        previous = str(role)
    return "".join(parts)


@functools.cache
def register_formats() -> None:
    """Make the text-continuation format known to llama-cpp-python (once per process)."""
    from llama_cpp import llama_chat_format

    @llama_chat_format.register_chat_format(TEXT_CONTINUATION_FORMAT)
    def format_text_continuation(messages: list[dict[str, Any]], **_kwargs: Any) -> Any:
        return llama_chat_format.ChatFormatterResponse(prompt=continuation_text(messages))

    del format_text_continuation


def continues(messages: list[dict[str, Any]]) -> bool:
    """Whether this chat asks to continue its last message (the assistant's, with text)."""
    return bool(messages) and messages[-1].get("role") == "assistant" and bool(messages[-1].get("content"))


def open_chat_stream(llm: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    """``llm.create_chat_completion(messages, stream=True, ...)``, or the continuation of the last reply."""
    if not continues(messages):
        return llm.create_chat_completion(messages=messages, stream=True, **kwargs)
    from llama_cpp import llama_chat_format

    handler: Any = (  # llama-cpp-python's own choice, as in ``Llama.create_chat_completion``
        llm.chat_handler
        or llm._chat_handlers.get(llm.chat_format)
        or llama_chat_format.get_chat_completion_handler(llm.chat_format)
    )
    unfinished = str(messages[-1]["content"])
    marked = [*messages[:-1], {**messages[-1], "content": _MARKER}]
    return handler(llama=_Prefilled(llm, unfinished), messages=marked, stream=True, **kwargs)


class _Prefilled:
    """The model, except that the prompt it is asked to tokenize ends with the unfinished reply."""

    def __init__(self, llm: Any, unfinished: str) -> None:
        self._llm = llm
        self._unfinished = unfinished

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        rendered = text.decode("utf-8", errors="replace")
        cut = rendered.rfind(_MARKER)
        if cut < 0:
            raise ContinuationError(
                "This model's chat template does not keep the reply's text, so the reply cannot be continued; "
                "regenerate it with a larger Max tokens instead."
            )
        prompt = rendered[:cut] + self._unfinished
        return list(self._llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=special))
