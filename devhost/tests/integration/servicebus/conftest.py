"""A real embedded broker per test, driven by the real azure-servicebus SDK.

Every SDK call carries a timeout (max_wait_time / timeout=) and every test a pytest-timeout:
the SDK hangs forever when CBS fails, so a broken broker must fail tests, never hang them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusClient
from devhost_tests_support.sb_helpers import broker_config

from devhost.servicebus.server import ServiceBusBroker


@pytest.fixture
def broker() -> Iterator[ServiceBusBroker]:
    """A started broker on an ephemeral port with the queues of TEST_CONFIG."""
    with ServiceBusBroker(broker_config()) as running:
        yield running


@pytest.fixture
def client(broker: ServiceBusBroker) -> Iterator[ServiceBusClient]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb_client:
        yield sb_client
