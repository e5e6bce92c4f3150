"""What every test of the app starts from: the app's process-wide state as a new process has it."""

from collections.abc import Iterator

import pytest

import bootstrap
from observability import metrics


@pytest.fixture(autouse=True)
def fresh_gauges() -> Iterator[None]:
    """The backlog gauges hold the last value a run reported for the whole process; a test
    that set them must not hand them to the next (a demo run in the same process reports
    them)."""
    metrics.reset_gauges()
    yield
    metrics.reset_gauges()


@pytest.fixture(autouse=True)
def no_services_left_built(request: pytest.FixtureRequest) -> Iterator[None]:
    """The app's services are built once per process from the settings of that moment; a test
    that leaves them built hands its settings (stores, reply queues) to every later test of
    its worker, which then fail far from the cause."""
    yield
    if bootstrap._services is not None:
        pytest.fail(
            f"{request.node.nodeid} left the app's services built: await bootstrap.shutdown() "
            "in its teardown"
        )
