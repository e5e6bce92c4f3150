"""The event loop of the devhost's commands (``devhost start``) and of tools built on it.

The devhost does in Python what the Functions host does in .NET: every trigger listener,
settlement, durable bookkeeping and HTTP call share one event loop, so the loop's own cost
counts. uvloop (installed by ``make setup``) runs the same asyncio code about a tenth faster
end to end (``make bench-pipeline``); where it is not available (Windows) the standard loop
runs it unchanged. Tests use the standard loop: nothing in the app or devhost depends on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the fastest loop available."""
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(main)
