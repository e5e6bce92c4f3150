"""The app's pool for blocking calls: sized by BLOCKING_CALL_THREADS, not by the event
loop's default executor, and carrying the caller's correlation context (D4, U4, C9)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator

import pytest

import bootstrap
from adapters import blocking_calls
from config import DEFAULT_BLOCKING_CALL_THREADS

BARRIER_SECONDS = 5.0


@pytest.fixture(autouse=True)
def default_pool() -> Iterator[None]:
    yield
    blocking_calls.use_threads(DEFAULT_BLOCKING_CALL_THREADS)


async def threads_used(calls: int, together: int) -> set[str]:
    """The threads that ran `calls` calls which wait, `together` at a time, for each other:
    a pool of fewer threads than `together` breaks the barrier."""
    barrier = threading.Barrier(together, timeout=BARRIER_SECONDS)

    def meet() -> str:
        barrier.wait()
        return threading.current_thread().name

    return set(await asyncio.gather(*(blocking_calls.run(meet) for _ in range(calls))))


async def test_the_pool_runs_as_many_calls_at_once_as_the_setting_says_and_no_more() -> None:
    bootstrap.check_settings({"BLOCKING_CALL_THREADS": "12"})
    assert blocking_calls.threads() == 12

    # Twice as many calls as threads, twelve at a time: all twelve threads take part and no
    # thirteenth exists, which a loop default executor of min(32, CPUs + 4) would not give.
    used = await threads_used(calls=24, together=12)

    assert len(used) == 12
    assert all(name.startswith("app-blocking") for name in used)


async def test_resizing_the_pool_applies_to_later_calls() -> None:
    blocking_calls.use_threads(2)
    assert len(await threads_used(calls=4, together=2)) == 2

    blocking_calls.use_threads(5)
    assert len(await threads_used(calls=10, together=5)) == 5


async def test_a_call_sees_the_callers_context() -> None:
    order: contextvars.ContextVar[str] = contextvars.ContextVar("order")
    order.set("o-context")

    assert await blocking_calls.run(order.get) == "o-context"


async def test_a_call_passes_arguments_and_raises_what_the_function_raises() -> None:
    assert await blocking_calls.run(divmod, 7, 2) == (3, 1)
    with pytest.raises(ZeroDivisionError):
        await blocking_calls.run(divmod, 1, 0)


def test_a_pool_without_threads_is_refused_at_start_up() -> None:
    with pytest.raises(ValueError, match="BLOCKING_CALL_THREADS"):
        bootstrap.check_settings({"BLOCKING_CALL_THREADS": "0"})
