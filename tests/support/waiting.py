"""Waiting inside a running event loop, for tests."""

from __future__ import annotations

import asyncio
import time


async def until(predicate, timeout: float = 30.0) -> None:
    """Let the loop run until ``predicate()`` is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)
