"""Fixtures for the queue-model unit tests: a virtual clock and namespaces built on it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from devhost_tests_support.broker_model import MakeNamespace

from devhost.servicebus.config import BrokerConfig, QueueSettings
from devhost.servicebus.entities import Namespace
from devhost.servicebus.journal import Journal
from devhost.testing import BrokerClock


@pytest.fixture
def clock() -> BrokerClock:
    return BrokerClock()


@pytest.fixture
def make_namespace(clock: BrokerClock) -> MakeNamespace:
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
