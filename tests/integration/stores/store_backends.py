"""Store backends for the store contract suite: every backend passes the same tests.

`StoreFactory.open_stores()` opens a NEW pair of store objects over the SAME backing data
each time it is called, the way two function hosts share one database; tests that race use
one pair per thread. Issue 5 adds a Cosmos factory to `BACKENDS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from adapters.sqlite_store import open_sqlite_stores
from domain.ports import OrderStore, StateStore, StoreMetrics


@dataclass
class StoreFactory:
    """Opens store pairs over one backing database and closes them all at the end."""

    opener: Callable[[StoreMetrics], tuple[StateStore, OrderStore]]
    opened: list[StateStore | OrderStore] = field(default_factory=list)

    def open_stores(self, metrics: StoreMetrics | None = None) -> tuple[StateStore, OrderStore]:
        states, orders = self.opener(metrics if metrics is not None else StoreMetrics())
        self.opened += [states, orders]
        return states, orders

    def close(self) -> None:
        for store in self.opened:
            store.close()


def _sqlite(directory: Path) -> Callable[[StoreMetrics], tuple[StateStore, OrderStore]]:
    def opener(metrics: StoreMetrics) -> tuple[StateStore, OrderStore]:
        return open_sqlite_stores(directory, metrics)

    return opener


BACKENDS: dict[str, Callable[[Path], Callable[[StoreMetrics], tuple[StateStore, OrderStore]]]] = {
    "sqlite": _sqlite,
}
