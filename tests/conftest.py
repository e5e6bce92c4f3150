"""What every test of the app starts from: the app's process-wide state as a new process has it."""

from collections.abc import Iterator

import pytest

from observability import metrics


@pytest.fixture(autouse=True)
def fresh_gauges() -> Iterator[None]:
    """The backlog gauges hold the last value a run reported for the whole process; a test
    that set them must not hand them to the next (a demo run in the same process reports
    them)."""
    metrics.reset_gauges()
    yield
    metrics.reset_gauges()
