"""Fixtures for the queue-model unit tests: a virtual clock and namespaces built on it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from devhost.servicebus.config import BrokerConfig, QueueSettings
from devhost.servicebus.entities import Namespace
from devhost.servicebus.journal import Journal

START_MS = 1_700_000_000_000


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def tick(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


MakeNamespace = Callable[..., Namespace]


@pytest.fixture
def make_namespace(clock: FakeClock) -> MakeNamespace:
    """Build a namespace with one queue "orders" whose settings the test overrides."""

    def make(
        *,
        journal: Journal | None = None,
        auto_create: bool = False,
        **settings: Any,
    ) -> Namespace:
        defaults: dict[str, Any] = {"lock_duration": timedelta(seconds=30)}
        queue = QueueSettings(name="orders", **(defaults | settings))
        config = BrokerConfig(
            namespace="sbemulatorns", queues={"orders": queue}, auto_create=auto_create
        )
        return Namespace(config, clock=clock, journal=journal)

    return make
