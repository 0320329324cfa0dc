"""The JSON-lines protocol between the app and its llama.cpp worker process.

Commands (app -> worker): load, chat, stop, unload, shutdown; each but shutdown carries an ``id``.
Events (worker -> app): hello, loaded, delta, done, error, unloaded; replies carry the command's ``id``.
"""

from __future__ import annotations

import json
from typing import Any

WORKER_MODULE = "app.backends.llamacpp.worker"

# error kinds a worker reports
ERR_LOAD = "load"
ERR_PROMPT_TOO_LONG = "prompt_too_long"
ERR_GENERATION = "generation"
ERR_BAD_COMMAND = "bad_command"


def encode(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def decode(line: bytes) -> dict[str, Any]:
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError("protocol message is not an object")
    return message
