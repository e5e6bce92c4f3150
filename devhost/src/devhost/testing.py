"""Helpers for tests of a Functions app under the devhost: bounded waits on a condition and
an embedded broker with the queues a test names.

A test waits for something to happen only through ``eventually`` (and its forms), which
fail naming what they waited for; never through a sleep. The pytest plugin
(``devhost.pytest_plugin``, registered on install) adds the ``virtual_clock`` fixture.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from devhost.servicebus.config import parse_config
from devhost.servicebus.server import ServiceBusBroker

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


def queue(name: str, **properties: Any) -> dict[str, Any]:
    """A queue of the emulator's Config.json: its name and its ``Properties``."""
    return {"Name": name, "Properties": properties}


@contextmanager
def running_broker(queues: Sequence[dict[str, Any]]) -> Iterator[ServiceBusBroker]:
    """The embedded broker on a free loopback port with `queues`, stopped on exit; its
    ``connection_string`` is what the app's ``ServiceBusConnection`` setting takes."""
    document = {"UserConfig": {"Namespaces": [{"Name": "tests", "Queues": list(queues)}]}}
    with ServiceBusBroker(parse_config(document)) as broker:
        yield broker


BROKER_CLOCK_START_MS = 1_700_000_000_000


class BrokerClock:
    """The embedded broker's queue model on a clock that moves only when told to: pass it
    as ``Namespace(config, clock=BrokerClock())`` and ``tick`` through lock durations, time
    to live and scheduled times at once (milliseconds since the epoch)."""

    def __init__(self, now: int = BROKER_CLOCK_START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def tick(self, ms: int) -> None:
        self.now += ms
