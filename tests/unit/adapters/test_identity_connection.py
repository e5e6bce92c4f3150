"""Identity-based connections: the app's Cosmos DB and Service Bus clients authenticate as the
identity the Functions host would pick from the same settings.

The credentials are the real azure-identity objects. Where a test asks one for a token, it
asks a managed identity endpoint on loopback (the App Service form, ``IDENTITY_ENDPOINT``
and ``IDENTITY_HEADER``, which Flex Consumption sets), so the identity a request names is
the one Azure would see.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import azure.identity
import azure.identity.aio
import pytest

from adapters import cosmos_connection
from adapters.cosmos_connection import CosmosOptions
from adapters.identity_connection import (
    ConnectionSettingsError,
    identity_choice,
    sync_credential,
)
from adapters.servicebus_publisher import client_from_environment

CLIENT_ID = "7d0c3b6a-5f0e-4d8e-9a51-2b1f0c0de001"
RESOURCE_ID = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/"
    "Microsoft.ManagedIdentity/userAssignedIdentities/orders-app"
)
NAMESPACE = "orders-ns.servicebus.windows.net"
ENDPOINT = "https://orders-db.documents.azure.com:443/"


class TokenRequests:
    """A managed identity endpoint on loopback that records what each token request names."""

    def __init__(self) -> None:
        self.queries: list[dict[str, list[str]]] = []
        recorded = self.queries

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorded.append(parse_qs(urlparse(self.path).query))
                body = json.dumps(
                    {
                        "access_token": "token",
                        "expires_on": str(int(time.time()) + 3600),
                        "resource": "https://servicebus.azure.net",
                        "token_type": "Bearer",
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/msi/token"


@pytest.fixture
def token_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[TokenRequests]:
    requests = TokenRequests()
    thread = threading.Thread(target=requests.server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("IDENTITY_ENDPOINT", requests.url)
    monkeypatch.setenv("IDENTITY_HEADER", "secret-header")
    monkeypatch.delenv("AZURE_CLIENT_ID", raising=False)
    yield requests
    requests.server.shutdown()
    requests.server.server_close()
    thread.join(timeout=5)


# --- Service Bus: the publisher's client ---------------------------------------------------


async def test_service_bus_uses_the_user_assigned_identity_the_settings_name(
    token_endpoint: TokenRequests,
) -> None:
    client = client_from_environment(
        {
            "ServiceBusConnection__fullyQualifiedNamespace": NAMESPACE,
            "ServiceBusConnection__credential": "managedidentity",
            "ServiceBusConnection__clientId": CLIENT_ID,
        }
    )
    credential = client._credential
    assert type(credential) is azure.identity.aio.ManagedIdentityCredential
    async with credential:
        token = await asyncio_bound(credential.get_token("https://servicebus.azure.net/.default"))
    assert token.token == "token"
    assert [query.get("client_id") for query in token_endpoint.queries] == [[CLIENT_ID]]
    await client.close()


async def test_service_bus_without_credential_setting_uses_default_azure_credential() -> None:
    client = client_from_environment({"ServiceBusConnection__fullyQualifiedNamespace": NAMESPACE})
    assert type(client._credential) is azure.identity.aio.DefaultAzureCredential
    await client._credential.close()
    await client.close()


def test_the_settings_names_are_matched_ignoring_case_as_the_host_does() -> None:
    choice = identity_choice(
        {
            "ServiceBusConnection__Credential": "ManagedIdentity",
            "ServiceBusConnection__clientID": CLIENT_ID,
        },
        "ServiceBusConnection",
    )
    assert (choice.kind, choice.client_id) == ("managed-identity", CLIENT_ID)


# --- Cosmos DB: the stores' client ---------------------------------------------------------


OPTIONS = CosmosOptions(
    database="orderprocessing",
    state_container="state",
    orders_container="orders",
    deadline_index_container="deadlines",
    retry_total=1,
    retry_backoff_max_seconds=1,
    connection_timeout_seconds=1,
    read_timeout_seconds=1,
    operation_timeout_seconds=1,
)


def test_cosmos_uses_the_user_assigned_identity_and_never_creates_containers(
    monkeypatch: pytest.MonkeyPatch, token_endpoint: TokenRequests
) -> None:
    built: list[tuple[str, Any]] = []

    class RecordingClient:
        def __init__(self, url: str, credential: Any, **_options: Any) -> None:
            built.append((url, credential))

    monkeypatch.setattr(cosmos_connection, "CosmosClient", RecordingClient)
    _, keyed = cosmos_connection.connect(
        {
            "CosmosConnection__accountEndpoint": ENDPOINT,
            "CosmosConnection__credential": "managedidentity",
            "CosmosConnection__clientId": CLIENT_ID,
        },
        OPTIONS,
    )
    assert keyed is False
    ((url, credential),) = built
    assert url == ENDPOINT
    assert type(credential) is azure.identity.ManagedIdentityCredential
    token = credential.get_token("https://cosmos.azure.com/.default")
    assert token.token == "token"
    assert [query.get("client_id") for query in token_endpoint.queries] == [[CLIENT_ID]]


def test_a_resource_id_names_the_identity_instead_of_a_client_id(
    token_endpoint: TokenRequests,
) -> None:
    choice = identity_choice(
        {
            "CosmosConnection__credential": "managedidentity",
            "CosmosConnection__managedIdentityResourceId": RESOURCE_ID,
        },
        "CosmosConnection",
    )
    credential = sync_credential(choice)
    assert type(credential) is azure.identity.ManagedIdentityCredential
    credential.get_token("https://cosmos.azure.com/.default")
    ((query,),) = [token_endpoint.queries]
    assert "client_id" not in query
    assert RESOURCE_ID in {value for values in query.values() for value in values}


def test_managed_identity_without_an_id_is_the_system_assigned_one() -> None:
    choice = identity_choice(
        {"CosmosConnection__credential": "managedidentity"}, "CosmosConnection"
    )
    assert choice.describe() == "system-assigned managed identity"
    assert type(sync_credential(choice)) is azure.identity.ManagedIdentityCredential


def test_a_service_principal_for_local_development() -> None:
    choice = identity_choice(
        {
            "CosmosConnection__tenantId": "tenant",
            "CosmosConnection__clientId": CLIENT_ID,
            "CosmosConnection__clientSecret": "s3cret",
        },
        "CosmosConnection",
    )
    credential = sync_credential(choice)
    assert type(credential) is azure.identity.ClientSecretCredential
    assert "s3cret" not in repr(choice)
    assert "s3cret" not in choice.describe()
    assert choice.describe() == f"service principal {CLIENT_ID} of tenant tenant"


def test_a_lone_client_id_is_default_azure_credentials_managed_identity() -> None:
    choice = identity_choice({"CosmosConnection__clientId": CLIENT_ID}, "CosmosConnection")
    assert type(sync_credential(choice)) is azure.identity.DefaultAzureCredential
    assert choice.describe() == f"DefaultAzureCredential, managed identity client id {CLIENT_ID}"


# --- what is refused, naming the setting ---------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"__credential": "workloadidentity"},
            "ServiceBusConnection__credential must be 'managedidentity' or unset, "
            "got 'workloadidentity'",
        ),
        (
            {
                "__credential": "managedidentity",
                "__clientId": CLIENT_ID,
                "__managedIdentityResourceId": RESOURCE_ID,
            },
            "set ServiceBusConnection__clientId or ServiceBusConnection__managedIdentityResourceId,"
            " not both",
        ),
        (
            {"__tenantId": "t", "__clientId": CLIENT_ID, "__clientCertificate": "AB12"},
            "ServiceBusConnection__clientCertificate is not supported",
        ),
        (
            {"__clientSecret": "s", "__clientId": CLIENT_ID},
            "ServiceBusConnection__tenantId is not set",
        ),
        (
            {"__tenantId": "t"},
            "ServiceBusConnection__clientId, ServiceBusConnection__clientSecret is not set",
        ),
        (
            {"__credential": "managedidentity", "__clientSecret": "s"},
            "ServiceBusConnection__clientSecret is ignored by the Functions host",
        ),
        (
            {"__managedIdentityResourceId": RESOURCE_ID},
            "ServiceBusConnection__managedIdentityResourceId needs "
            "ServiceBusConnection__credential=managedidentity",
        ),
    ],
)
def test_settings_the_app_cannot_honour_stop_it_naming_the_setting(
    settings: dict[str, str], message: str
) -> None:
    environ = {"ServiceBusConnection__fullyQualifiedNamespace": NAMESPACE}
    environ.update({f"ServiceBusConnection{suffix}": value for suffix, value in settings.items()})
    with pytest.raises(ConnectionSettingsError) as refused:
        client_from_environment(environ)
    assert message in str(refused.value)


async def asyncio_bound(awaitable: Any) -> Any:
    async with asyncio.timeout(10):
        return await awaitable
