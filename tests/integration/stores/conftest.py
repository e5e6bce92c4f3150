"""Fixtures of the store tests: `store_factory` is parametrised over every store backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from domain.ports import OrderStore, StateStore
from tests.integration.stores.store_backends import BACKENDS, StoreFactory


@pytest.fixture(params=sorted(BACKENDS))
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    factory = StoreFactory(BACKENDS[request.param](tmp_path))
    yield factory
    factory.close()


@pytest.fixture
def stores(store_factory: StoreFactory) -> tuple[StateStore, OrderStore]:
    return store_factory.open_stores()
