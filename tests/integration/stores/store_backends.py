"""Store backends for the store contract suite: every backend passes the same tests.

`StoreFactory.open_stores()` opens a NEW pair of store objects over the SAME backing data
each time it is called, the way two function hosts share one database; tests that race use
one pair per thread.

- `sqlite`: the embedded stores in a fresh directory per test.
- `cosmos`: the Cosmos DB adapter against `@vercel/cosmosdb-server` (npm), one server per
  test session and a fresh database per test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from adapters.cosmos_store import open_cosmos_stores
from adapters.sqlite_store import open_sqlite_stores
from bootstrap import cosmos_options
from config import Settings
from domain.ports import OrderStore, StateStore, StoreMetrics

Opener = Callable[[StoreMetrics], tuple[StateStore, OrderStore]]

BACKENDS = ("cosmos", "sqlite")

COSMOS_TEST_TIMEOUTS = {
    "COSMOS_CONNECTION_TIMEOUT_SECONDS": "5",
    "COSMOS_READ_TIMEOUT_SECONDS": "20",
    "COSMOS_OPERATION_TIMEOUT_SECONDS": "30",
}
"""Generous bounds for a loaded 2-core machine; every SDK call is bounded by them."""


@dataclass
class StoreFactory:
    """Opens store pairs over one backing database and closes them all at the end."""

    opener: Opener
    opened: list[StateStore | OrderStore] = field(default_factory=list)

    def open_stores(self, metrics: StoreMetrics | None = None) -> tuple[StateStore, OrderStore]:
        states, orders = self.opener(metrics if metrics is not None else StoreMetrics())
        self.opened += [states, orders]
        return states, orders

    def close(self) -> None:
        for store in self.opened:
            store.close()


def sqlite_opener(directory: Path) -> Opener:
    def opener(metrics: StoreMetrics) -> tuple[StateStore, OrderStore]:
        return open_sqlite_stores(directory, metrics)

    return opener


def cosmos_environ(connection_string: str, database: str) -> dict[str, str]:
    """App settings that point the app at a Cosmos server and database."""
    return {
        "STATE_STORE": "cosmos",
        "CosmosConnection": connection_string,
        "COSMOS_DATABASE": database,
        **COSMOS_TEST_TIMEOUTS,
    }


def cosmos_opener(connection_string: str) -> Opener:
    """Stores over a database of their own on the server behind `connection_string`."""
    environ = cosmos_environ(connection_string, f"test-{uuid.uuid4().hex[:12]}")
    options = cosmos_options(Settings.from_environ(environ))

    def opener(metrics: StoreMetrics) -> tuple[StateStore, OrderStore]:
        return open_cosmos_stores(options, environ, metrics)

    return opener
