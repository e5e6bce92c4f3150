"""Fixtures shared by the integration tests: every simulated remote service started
in-process, an HTTP session whose calls carry a timeout, and the app's metrics read in memory."""

from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from tests.integration.simulators.service_calls import TIMEOUT
from tests.support.metric_points import bound_reader
from tools.simulators.services import SimulatedServices


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


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    """The app's instruments (observability.metrics) bound to a provider this test reads."""
    with bound_reader() as memory:
        yield memory
