"""Fixtures for the durable engine tests: one indexing of each example app per session
(``app.get_functions()`` may be called only once per app) and engines on virtual time."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from functools import cache

import pytest_asyncio
from azure.functions.decorators.function_app import Function
from devhost.durable import DurableEngine, VirtualClock

from tests.integration.durable.apps import semantics_app

START = dt.datetime(2030, 1, 1, 8, 0, tzinfo=dt.UTC)


@cache
def semantics_functions() -> tuple[Function, ...]:
    return tuple(semantics_app.app.get_functions())


EngineFactory = Callable[..., DurableEngine]


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
