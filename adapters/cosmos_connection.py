"""Connecting to Cosmos DB: connection, errors, paging and request charge (C4, C9, U2).

`connect` takes CosmosConnection (a connection string with an account key, which alone may
create containers) or CosmosConnection__accountEndpoint with an identity
(`adapters.identity_connection`). `translate_errors` turns what still fails after the SDK's
bounded retries into `StoreUnavailable`, for the trigger to retry; `first_page` reads one
SDK page from a continuation token; `RequestCharge` sums a store operation's request charge.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.paging import ItemPaged, PageIterator
from azure.cosmos import CosmosClient
from azure.cosmos.exceptions import CosmosClientTimeoutError, CosmosHttpResponseError

from adapters.identity_connection import ConnectionSettingsError, identity_choice, sync_credential
from domain.ports import StoreError, StoreUnavailable

CONNECTION_SETTING = "CosmosConnection"
ENDPOINT_SETTING = "CosmosConnection__accountEndpoint"
REQUEST_CHARGE_HEADER = "x-ms-request-charge"

TRANSIENT_STATUS_CODES = frozenset({408, 429, 449, 500, 503})
"""Timeout, throttled past the SDK's retries, retry-with, server error, unavailable."""


@dataclass(frozen=True)
class CosmosOptions:
    """What the adapter needs besides the connection: names, retries and timeouts.

    The composition root fills it from the COSMOS_* settings.
    """

    database: str
    state_container: str
    orders_container: str
    deadline_index_container: str
    retry_total: int
    retry_backoff_max_seconds: int
    connection_timeout_seconds: float
    read_timeout_seconds: float
    operation_timeout_seconds: float


def connect(environ: Mapping[str, str], options: CosmosOptions) -> tuple[CosmosClient, bool]:
    """A client from the app settings, and whether it authenticates with an account key.

    Only a key-authenticated client may create the database and containers; with an
    identity, the infrastructure has created them.
    """
    retry: dict[str, Any] = {
        "retry_total": options.retry_total,
        "retry_backoff_max": options.retry_backoff_max_seconds,
        "connection_timeout": options.connection_timeout_seconds,
        "read_timeout": options.read_timeout_seconds,
    }
    connection = environ.get(CONNECTION_SETTING, "").strip()
    endpoint = environ.get(ENDPOINT_SETTING, "").strip()
    with translate_errors("connecting to Cosmos DB"):
        if connection:
            try:
                return CosmosClient.from_connection_string(connection, **retry), True
            except ValueError as error:
                raise ConnectionSettingsError(
                    f"{CONNECTION_SETTING} must be 'AccountEndpoint=https://...;AccountKey=...;': "
                    f"{error}"
                ) from None
        if endpoint:
            credential = sync_credential(identity_choice(environ, CONNECTION_SETTING))
            return CosmosClient(endpoint, credential=credential, **retry), False
    raise ConnectionSettingsError(
        f"STATE_STORE=cosmos needs {CONNECTION_SETTING} (a connection string, locally) or "
        f"{ENDPOINT_SETTING} (the account endpoint, with a managed identity in Azure)"
    )


class RequestCharge:
    """Sums the request charge of the responses one store operation receives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = 0.0

    def add_from(self, headers: Mapping[str, Any] | None) -> None:
        raw = None if headers is None else headers.get(REQUEST_CHARGE_HEADER)
        if raw is None:
            return
        with self._lock:
            self.total += float(raw)

    def hook(self, headers: Mapping[str, Any], _body: object) -> None:
        """The SDK's `response_hook`: called with the headers of each response."""
        self.add_from(headers)


def first_page(
    items: ItemPaged[dict[str, Any]], continuation: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """One SDK page of a query from `continuation`, and the token of the page after it."""
    pages = items.by_page(continuation)
    if not isinstance(pages, PageIterator):
        raise TypeError(f"azure-cosmos returned {type(pages).__name__}, not a PageIterator")
    page = list(next(pages, iter(())))
    token: str | None = pages.continuation_token
    return page, token


@contextmanager
def translate_errors(action: str, charge: RequestCharge | None = None) -> Iterator[None]:
    """Turn SDK failures into the port's errors; callers handle the expected statuses.

    Failed responses carry a request charge too, which is added to `charge`.
    """
    try:
        yield
    except CosmosHttpResponseError as error:
        if charge is not None:
            charge.add_from(error.headers)
        if error.status_code in TRANSIENT_STATUS_CODES:
            raise StoreUnavailable(
                f"Cosmos DB is unavailable or throttling while {action} "
                f"(HTTP {error.status_code}, after the SDK's retries): {error.message}"
            ) from error
        if error.status_code in (401, 403):
            raise StoreError(
                f"Cosmos DB refused access while {action} (HTTP {error.status_code}): check "
                f"the account key in {CONNECTION_SETTING} or the identity's data-plane role"
            ) from error
        raise
    except (ServiceRequestError, ServiceResponseError, CosmosClientTimeoutError) as error:
        raise StoreUnavailable(
            f"Cosmos DB cannot be reached while {action}: {error}; the trigger will retry"
        ) from error
