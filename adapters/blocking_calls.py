"""The app's own thread pool for the blocking calls of its async function code.

The state store and orders database SDKs (sqlite3, the synchronous azure-cosmos client) and
Service Bus settlement over the host's gRPC service block the calling thread, so async
function code runs them here, off the event loop, with `run`.

Why not ``asyncio.to_thread``: it uses the event loop's default executor, and the Functions
Python worker leaves that at asyncio's default of min(32, CPUs + 4) threads. On a two-core
instance six threads would then serve the store calls of every activity
(``maxConcurrentActivityFunctions``) and every Service Bus message (``maxConcurrentCalls``)
in flight, which queue behind each other until steps run past their CompleteBy (D4) and are
retried for nothing (U4). The pool here has ``BLOCKING_CALL_THREADS`` threads, which the
composition root sets from the settings (`use_threads`) before any function runs; until
then, as in tests that call an adapter directly, it has a few.

A call keeps the caller's context, as ``asyncio.to_thread`` does, so the correlation ids of
``observability.logs`` (C9) and the trace context follow it into the thread.
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
