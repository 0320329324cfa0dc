"""Running coroutines from Qt slots: one place that keeps task references and reports failures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("app.ui")
_running: set[asyncio.Task[Any]] = set()


def spawn(coro: Coroutine[Any, Any, Any], name: str = "") -> asyncio.Task[Any]:
    """Start ``coro`` on the running loop; an exception it raises reaches the loop's exception handler."""
    task = asyncio.ensure_future(coro)
    if name:
        task.set_name(name)
    _running.add(task)
    task.add_done_callback(_finished)
    return task


def _finished(task: asyncio.Task[Any]) -> None:
    _running.discard(task)
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        loop = asyncio.get_event_loop()
        loop.call_exception_handler({"message": f"Task {task.get_name()} failed", "exception": exc, "task": task})


def running_tasks() -> set[asyncio.Task[Any]]:
    return set(_running)


def loop_running() -> bool:
    """Whether an asyncio loop runs now (Qt events can be processed outside it, e.g. while a test sets up)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
