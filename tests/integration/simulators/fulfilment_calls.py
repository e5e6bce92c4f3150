"""The timeout of the simulated services' calls under the module name
tests/integration/conftest.py imports it from; the calls themselves are in `service_calls`."""

from tests.integration.simulators.service_calls import TIMEOUT

__all__ = ["TIMEOUT"]
