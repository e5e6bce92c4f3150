"""The app's own thread pool for the blocking calls of its async function code (C9).

`run` calls a store SDK or a settlement off the event loop, in the caller's context, so the
correlation ids and the trace follow it into the thread. The composition root sizes the
pool from BLOCKING_CALL_THREADS (`use_threads`) before any function runs; until then it has
a few threads. Why not ``asyncio.to_thread``: docs/architecture.md, "Blocking calls".
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.Lock()
_threads = 4
_pool: ThreadPoolExecutor | None = None


def use_threads(threads: int) -> None:
    """Size the pool: later calls get ``threads`` threads. A pool already made with another
    size is replaced; the calls it is running finish there."""
    global _threads, _pool
    if threads < 1:
        raise ValueError(f"the pool needs at least one thread, got {threads}")
    with _lock:
        if threads == _threads:
            return
        _threads = threads
        replaced, _pool = _pool, None
    if replaced is not None:
        replaced.shutdown(wait=False)


def threads() -> int:
    """How many threads the pool has (or will have when first used)."""
    return _threads


async def run(function: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """``function(*args, **kwargs)`` on one of the pool's threads, in the caller's context."""
    call = functools.partial(contextvars.copy_context().run, function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_executor(), call)


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=_threads, thread_name_prefix="app-blocking")
        return _pool
