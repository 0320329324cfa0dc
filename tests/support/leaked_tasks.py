"""Tasks a UI test leaves running: after the test each one gets a grace period to end; one still running
then is cancelled (so none runs on a closed loop) and named, so the test fails instead of hiding the leak."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

GRACE_S = 10.0  # how long the tasks a test started may take to finish after it


def tasks_since(before: Collection[asyncio.Task] = ()) -> set[asyncio.Task]:
    """Tasks on the running loop other than the caller's own and those in ``before``."""
    current = asyncio.current_task()
    return {task for task in asyncio.all_tasks() if task is not current and task not in before}


async def drain(grace: float = GRACE_S) -> set[asyncio.Task]:
    """Let the running tasks finish; return those still running after ``grace`` seconds (not cancelled)."""
    pending = tasks_since()
    if not pending:
        return set()
    _done, late = await asyncio.wait(pending, timeout=grace)
    return late


async def settle(before: Collection[asyncio.Task] = (), grace: float = GRACE_S) -> list[str]:
    """Wait up to ``grace`` seconds for the tasks started since ``before``; cancel the late ones and return
    their names (empty: nothing was left running)."""
    pending = tasks_since(before)
    if not pending:
        return []
    _done, late = await asyncio.wait(pending, timeout=grace)
    for task in late:
        task.cancel()
    if late:
        await asyncio.wait(late, timeout=grace)
    return sorted(describe(task) for task in late)


def describe(task: asyncio.Task) -> str:
    coro = task.get_coro()
    return f"{task.get_name()} ({getattr(coro, '__qualname__', coro)})"
