"""Fixtures shared by the integration tests that call the simulated remote services: every
service started in-process, and an HTTP session whose calls carry a timeout."""

from collections.abc import AsyncIterator

import aiohttp
import pytest

from simulators.services import SimulatedServices
from tests.integration.simulators.fulfilment_calls import TIMEOUT


@pytest.fixture
async def services() -> AsyncIterator[SimulatedServices]:
    running = SimulatedServices()
    await running.start()
    yield running
    await running.stop()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as client_session:
        yield client_session
