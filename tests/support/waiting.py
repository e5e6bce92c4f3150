"""Bounded waits on conditions: the suite's only way to wait for something to happen."""

import asyncio
import time
from collections.abc import Awaitable, Callable

DEFAULT_BOUND_SECONDS = 20.0


async def eventually(
    condition: Callable[[], bool], what: str, bound: float = DEFAULT_BOUND_SECONDS
) -> None:
    """Return as soon as ``condition()`` holds; fail naming ``what`` after ``bound`` seconds."""
    deadline = time.monotonic() + bound
    # The conditions span threads and other components, so there is no single event to await:
    # yield to the loop and look again.
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {bound:.0f}s waiting for: {what}")
        await asyncio.sleep(0.001)


def eventually_sync(
    condition: Callable[[], bool], what: str, bound: float = DEFAULT_BOUND_SECONDS
) -> None:
    """The blocking form of ``eventually`` for tests without an event loop."""
    deadline = time.monotonic() + bound
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {bound:.0f}s waiting for: {what}")
        time.sleep(0.001)


async def eventually_true(
    condition: Callable[[], Awaitable[bool]], what: str, bound: float = DEFAULT_BOUND_SECONDS
) -> None:
    """``eventually`` for conditions that must await (a peek at a queue, a status query)."""
    deadline = time.monotonic() + bound
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {bound:.0f}s waiting for: {what}")
        await asyncio.sleep(0.05)
