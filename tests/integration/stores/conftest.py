"""Fixtures of the store tests: `store_factory` is parametrised over every store backend.

The Cosmos backend needs `@vercel/cosmosdb-server` from npm: one server serves the whole
session (`cosmos_server`), started only when a Cosmos test runs. A missing node or package
fails those tests with "run make setup"; they are never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from domain.ports import OrderStore, StateStore
from tests.integration.stores.store_backends import (
    BACKENDS,
    StoreFactory,
    cosmos_opener,
    sqlite_opener,
)
from tests.support.cosmos_server import CosmosServer

SERVER_CERTIFICATE_WARNING = "ignore::urllib3.exceptions.InsecureRequestWarning"
"""azure-cosmos skips certificate checks for 127.0.0.1 only, and urllib3 says so per request."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.filterwarnings(SERVER_CERTIFICATE_WARNING))


@pytest.fixture(scope="session")
def cosmos_server() -> Iterator[CosmosServer]:
    with CosmosServer() as server:
        yield server


@pytest.fixture(params=BACKENDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    if request.param == "cosmos":
        server: CosmosServer = request.getfixturevalue("cosmos_server")
        factory = StoreFactory(cosmos_opener(server.connection_string))
    else:
        factory = StoreFactory(sqlite_opener(tmp_path))
    yield factory
    factory.close()


@pytest.fixture
def stores(store_factory: StoreFactory) -> tuple[StateStore, OrderStore]:
    return store_factory.open_stores()
