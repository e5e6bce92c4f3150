"""The fulfilment service alone, started in-process (the simulated services and the HTTP
session are in tests/integration/conftest.py)."""

from collections.abc import AsyncIterator

import pytest

from tools.simulators.fulfilment import FulfilmentService


@pytest.fixture
async def service() -> AsyncIterator[FulfilmentService]:
    running = FulfilmentService()
    await running.start()
    yield running
    await running.stop()
