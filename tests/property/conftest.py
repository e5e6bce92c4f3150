"""Fixtures and settings of the property tests (hypothesis).

Profiles: `dev` (the default) runs 50 examples per property with no per-example deadline
(a Cosmos call on a loaded 2-core machine is slow, not wrong) and keeps failing examples
in `.hypothesis/` to replay them first; `ci` (selected by HYPOTHESIS_PROFILE=ci, or when
the CI variable is set) is derandomized, so a CI run is reproducible, and keeps no database;
`thorough` (HYPOTHESIS_PROFILE=thorough) runs 1000 examples per property, for a bug hunt.
The state machine's example counts are its own (`test_state_machine.EXAMPLES`).

`backend` gives each test module one store backend at a time, SQLite or the Cosmos server
(`tests.integration.stores`: the same server launcher and store openers as the store
contract suite). The backend lives for the module; hypothesis runs many examples against
it, each example working on order ids of its own (`unique_order_id`).
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.integration.stores.conftest import SERVER_CERTIFICATE_WARNING, cosmos_server
from tests.integration.stores.store_backends import (
    BACKENDS,
    StoreFactory,
    cosmos_opener,
    sqlite_opener,
)
from tests.support.cosmos_server import CosmosServer

__all__ = ["cosmos_server"]

_SLOW_IS_FINE = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile(
    "dev", max_examples=50, deadline=None, suppress_health_check=_SLOW_IS_FINE
)
settings.register_profile(
    "ci",
    max_examples=50,
    deadline=None,
    suppress_health_check=_SLOW_IS_FINE,
    derandomize=True,
    database=None,
    print_blob=True,
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=_SLOW_IS_FINE
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.filterwarnings(SERVER_CERTIFICATE_WARNING))


@pytest.fixture(scope="module", params=BACKENDS)
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StoreFactory]:
    """A store backend for the whole module: `open_stores()` gives store pairs over it."""
    if request.param == "cosmos":
        server: CosmosServer = request.getfixturevalue("cosmos_server")
        factory = StoreFactory(cosmos_opener(server.connection_string))
    else:
        factory = StoreFactory(sqlite_opener(tmp_path_factory.mktemp("sqlite")))
    yield factory
    factory.close()


_RUN = uuid.uuid4().hex[:6]
_NEXT = itertools.count()


def unique_order_id(stem: str = "o") -> str:
    """An order id no other example of this session uses: `stem` kept as far as it fits in
    the 64 characters of an OrderID."""
    prefix = f"{_RUN}{next(_NEXT)}-"
    return prefix + stem[: 64 - len(prefix)]
