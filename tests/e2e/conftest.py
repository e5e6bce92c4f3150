"""Fixtures the e2e tests share: the state store a run uses, the embedded default or a local
Cosmos DB API server (one per module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cosmos_server import CosmosServer


@pytest.fixture(scope="module")
def cosmos_server() -> Iterator[CosmosServer]:
    with CosmosServer() as server:
        yield server


@pytest.fixture(params=["sqlite", "cosmos"])
def store_settings(request: pytest.FixtureRequest) -> dict[str, str]:
    """The state store settings of a run: the embedded default, or a Cosmos API server."""
    if request.param == "cosmos":
        server: CosmosServer = request.getfixturevalue("cosmos_server")
        return {"STATE_STORE": "cosmos", "CosmosConnection": server.connection_string}
    return {"STATE_STORE": "sqlite"}
