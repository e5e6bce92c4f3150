"""The simulated services, started in-process, and an HTTP session with a timeout, for every
test here."""

from collections.abc import AsyncIterator

import aiohttp
import pytest

from simulators.fulfilment import FulfilmentService
from simulators.services import SimulatedServices
from tests.integration.simulators.fulfilment_calls import TIMEOUT


@pytest.fixture
async def service() -> AsyncIterator[FulfilmentService]:
    running = FulfilmentService()
    await running.start()
    yield running
    await running.stop()


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
