"""The Cosmos DB database and its three containers, defined once (S2, C6, U1, U2, U3).

`cosmos_layout` names them from the settings: `state` and `orders` partitioned by
`/OrderID`, `deadlines` by `/bucket` (`adapters.deadline_index`). `ensure_containers`
creates what is missing, with key auth only; on Azure the infrastructure creates them from
these same definitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from azure.cosmos import CosmosClient, DatabaseProxy, PartitionKey
from azure.cosmos.exceptions import CosmosResourceExistsError

from adapters.cosmos_connection import CosmosOptions

TTL_ENABLED_WITHOUT_DEFAULT = -1
"""Cosmos DB `defaultTtl`: items never expire unless they carry their own `ttl`."""


@dataclass(frozen=True)
class ContainerDefinition:
    """What Cosmos DB needs to create one container; infra renders the same values."""

    name: str
    partition_key_path: str
    indexing_policy: Mapping[str, Any]
    default_ttl: int | None = None

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "id": self.name,
            "partitionKey": {"paths": [self.partition_key_path], "kind": "Hash"},
            "indexingPolicy": dict(self.indexing_policy),
        }
        if self.default_ttl is not None:
            document["defaultTtl"] = self.default_ttl
        return document


@dataclass(frozen=True)
class CosmosLayout:
    """Names of the database and its three containers."""

    database: str
    state: ContainerDefinition
    orders: ContainerDefinition
    deadlines: ContainerDefinition

    @property
    def containers(self) -> tuple[ContainerDefinition, ...]:
        return (self.state, self.orders, self.deadlines)


STATE_INDEXING_POLICY: Mapping[str, Any] = {
    "indexingMode": "consistent",
    "automatic": True,
    "includedPaths": [{"path": "/*"}],
    "excludedPaths": [
        {"path": "/CompensationLog/*"},
        {"path": "/Owed/Messages/*"},
        {"path": '/"_etag"/?'},
    ],
    "compositeIndexes": [
        [
            {"path": "/ProcessState", "order": "ascending"},
            {"path": "/CompleteBy", "order": "ascending"},
        ],
    ],
}

ORDERS_INDEXING_POLICY: Mapping[str, Any] = {
    "indexingMode": "consistent",
    "automatic": True,
    "includedPaths": [{"path": "/OrderID/?"}],
    "excludedPaths": [{"path": "/*"}],
}
"""Orders are only read by id; indexing their items would cost RUs on every write."""

DEADLINE_INDEXING_POLICY: Mapping[str, Any] = {
    "indexingMode": "consistent",
    "automatic": True,
    "includedPaths": [{"path": "/bucket/?"}, {"path": "/CompleteBy/?"}],
    "excludedPaths": [{"path": "/*"}],
}


def cosmos_layout(options: CosmosOptions) -> CosmosLayout:
    """The layout named by COSMOS_DATABASE and the container settings."""
    return CosmosLayout(
        database=options.database,
        state=ContainerDefinition(
            options.state_container,
            "/OrderID",
            STATE_INDEXING_POLICY,
            TTL_ENABLED_WITHOUT_DEFAULT,
        ),
        orders=ContainerDefinition(options.orders_container, "/OrderID", ORDERS_INDEXING_POLICY),
        deadlines=ContainerDefinition(
            options.deadline_index_container, "/bucket", DEADLINE_INDEXING_POLICY
        ),
    )


def ensure_containers(client: CosmosClient, layout: CosmosLayout) -> DatabaseProxy:
    """Create the database and every container that is missing; existing ones are kept.

    The SDK's ``create_*_if_not_exists`` reads, then creates: when several processes start at
    once (function instances scaling out, the demo beside its worker), another one can create
    the resource in between, and the create answers 409. The resource then exists, as asked.
    """
    try:
        database = client.create_database_if_not_exists(layout.database)
    except CosmosResourceExistsError:
        database = client.get_database_client(layout.database)
    for definition in layout.containers:
        try:
            database.create_container_if_not_exists(
                definition.name,
                partition_key=PartitionKey(path=definition.partition_key_path),
                indexing_policy=dict(definition.indexing_policy),
                default_ttl=definition.default_ttl,
            )
        except CosmosResourceExistsError:
            continue
    return database
