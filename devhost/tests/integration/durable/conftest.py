"""Fixtures for the durable engine tests: engines on the semantics app, on virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from devhost_tests_support.durable import START, EngineFactory, semantics_functions

from devhost.durable import DurableEngine, VirtualClock


@pytest_asyncio.fixture
async def make_engine() -> AsyncIterator[EngineFactory]:
    """Build engines on the semantics app; every one is closed after the test."""
    engines: list[DurableEngine] = []

    def factory(database: str = ":memory:", **options: object) -> DurableEngine:
        options.setdefault("clock", VirtualClock(START))
        engine = DurableEngine(semantics_functions(), database, **options)  # type: ignore[arg-type]
        engines.append(engine)
        return engine

    yield factory
    for engine in engines:
        await engine.close()


@pytest_asyncio.fixture
async def engine(make_engine: EngineFactory) -> DurableEngine:
    return make_engine()
