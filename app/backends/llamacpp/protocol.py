"""The JSON-lines protocol between the app and its llama.cpp worker process.

Commands (app -> worker): load, chat, complete, embed, count, stop, unload, shutdown; each but shutdown carries an
``id``. ``chat`` (``messages``) and ``complete`` (``prompt``) take ``sampling`` and ``options`` (GenerationOptions).
Events (worker -> app): hello, loaded, delta (``text``, ``logprobs`` when asked), done, embedded (``vectors``),
counted (``tokens``), error, unloaded; replies carry the command's ``id``.
"""

from __future__ import annotations

import json
from typing import Any

from app.core import safe_json

WORKER_MODULE = "app.backends.llamacpp.worker"

# error kinds a worker reports
ERR_LOAD = "load"
ERR_PROMPT_TOO_LONG = "prompt_too_long"
ERR_GENERATION = "generation"
ERR_BAD_COMMAND = "bad_command"
ERR_BAD_INPUT = "bad_input"  # the request cannot work as asked (an unknown chat format, a schema): change it
ERR_TEMPLATE = "template"  # the model's chat template does not compile, or the sandbox blocked it
ERR_EXITED = "exit"  # the worker process ended: written by the app for the requests it had in flight
ERR_KERNEL_CRASH = "kernel_crash"  # it ended in llama.cpp's CPU-specific kernels: the app retries without them


def encode(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def decode(line: bytes, what: str = "a worker protocol message") -> dict[str, Any]:
    """One JSON object; malformed, too deep or too large input raises ``safe_json.JsonError`` (a ValueError).

    The default 16 MiB bound holds a whole conversation of several million tokens' text."""
    return safe_json.loads_object(line, what=what)
