"""The credential of an identity-based connection, chosen by the Functions host's rules.

The app's own SDK clients (the Cosmos DB stores, the Service Bus publisher) read the same
identity-based connection settings the Functions host reads for its bindings, so one set of
app settings authenticates the triggers and the app's clients alike. For a connection named
``<CONNECTION>`` (``ServiceBusConnection``, ``CosmosConnection``) the settings are
``<CONNECTION>__<property>``, matched ignoring case as the host's configuration does, and an
empty value counts as unset:

- ``__credential=managedidentity`` (any case): a managed identity. ``__clientId`` picks a
  user-assigned identity by its client id, ``__managedIdentityResourceId`` by its resource
  id (never both); with neither, the system-assigned identity.
- no ``__credential``, and ``__tenantId``, ``__clientId`` and ``__clientSecret``: that
  service principal (the host's form for local development against Azure resources).
- no ``__credential`` otherwise: ``DefaultAzureCredential``, as the host does; a lone
  ``__clientId`` becomes its managed identity client id, and without one it honours
  ``AZURE_CLIENT_ID`` itself.

Refused with a ``ConnectionSettingsError`` that names the setting, where the host would pick
another identity than the settings suggest or this app cannot do what the host does:

- any other ``__credential`` value;
- ``__clientId`` together with ``__managedIdentityResourceId``;
- ``__clientCertificate``: the host looks the thumbprint up in a Windows certificate store,
  which a Python worker on Linux does not have;
- ``__tenantId`` or ``__clientSecret`` without the other two service-principal settings, or
  beside ``__credential=managedidentity``;
- ``__managedIdentityResourceId`` without ``__credential=managedidentity``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from azure.core.credentials_async import AsyncTokenCredential

MANAGED_IDENTITY = "managedidentity"


class ConnectionSettingsError(ValueError):
    """A connection's app settings ask for what this app cannot honour; the message names
    the setting."""


Kind = Literal["managed-identity", "service-principal", "default"]


@dataclass(frozen=True)
class IdentityChoice:
    """Which identity a connection authenticates as, from its settings."""

    connection: str
    kind: Kind
    client_id: str | None = None
    resource_id: str | None = None
    tenant_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)

    def describe(self) -> str:
        """The choice in words, for the start-up log (never the secret)."""
        if self.kind == "managed-identity":
            if self.client_id:
                return f"user-assigned managed identity, client id {self.client_id}"
            if self.resource_id:
                return f"user-assigned managed identity {self.resource_id}"
            return "system-assigned managed identity"
        if self.kind == "service-principal":
            return f"service principal {self.client_id} of tenant {self.tenant_id}"
        if self.client_id:
            return f"DefaultAzureCredential, managed identity client id {self.client_id}"
        return "DefaultAzureCredential"


def identity_choice(environ: Mapping[str, str], connection: str) -> IdentityChoice:
    """The identity the settings of ``connection`` ask for, or a ConnectionSettingsError
    naming the setting that cannot be honoured."""
    values = _properties(environ, connection)

    def name(prop: str) -> str:
        return f"{connection}__{prop}"

    credential = values.get("credential")
    client_id = values.get("clientid")
    resource_id = values.get("managedidentityresourceid")
    tenant_id = values.get("tenantid")
    secret = values.get("clientsecret")
    if values.get("clientcertificate"):
        raise ConnectionSettingsError(
            f"{name('clientCertificate')} is not supported: the Functions host reads that "
            f"certificate from a Windows certificate store; use {name('credential')}="
            f"{MANAGED_IDENTITY} on Azure, or {name('tenantId')}, {name('clientId')} and "
            f"{name('clientSecret')} for a service principal"
        )
    if credential is not None:
        if credential.lower() != MANAGED_IDENTITY:
            raise ConnectionSettingsError(
                f"{name('credential')} must be '{MANAGED_IDENTITY}' or unset, got {credential!r}"
            )
        if client_id and resource_id:
            raise ConnectionSettingsError(
                f"set {name('clientId')} or {name('managedIdentityResourceId')}, not both: "
                "each names the user-assigned identity to use"
            )
        for prop, value in (("tenantId", tenant_id), ("clientSecret", secret)):
            if value:
                raise ConnectionSettingsError(
                    f"{name(prop)} is ignored by the Functions host when {name('credential')}="
                    f"{MANAGED_IDENTITY}: remove it, or remove {name('credential')} to "
                    "authenticate as a service principal"
                )
        return IdentityChoice(connection, "managed-identity", client_id, resource_id)
    if resource_id:
        raise ConnectionSettingsError(
            f"{name('managedIdentityResourceId')} needs {name('credential')}={MANAGED_IDENTITY}"
        )
    if tenant_id or secret:
        missing = [
            name(prop)
            for prop, value in (
                ("tenantId", tenant_id),
                ("clientId", client_id),
                ("clientSecret", secret),
            )
            if not value
        ]
        if missing:
            raise ConnectionSettingsError(
                f"a service principal needs {name('tenantId')}, {name('clientId')} and "
                f"{name('clientSecret')}: {', '.join(missing)} is not set"
            )
        return IdentityChoice(
            connection, "service-principal", client_id, tenant_id=tenant_id, client_secret=secret
        )
    return IdentityChoice(connection, "default", client_id)


def sync_credential(choice: IdentityChoice) -> TokenCredential:
    """The azure-identity credential of ``choice``, for a synchronous client (Cosmos DB)."""
    import azure.identity

    credential: TokenCredential = _build(choice, azure.identity)
    return credential


def async_credential(choice: IdentityChoice) -> AsyncTokenCredential:
    """The azure-identity credential of ``choice``, for an asyncio client (Service Bus)."""
    import azure.identity.aio

    credential: AsyncTokenCredential = _build(choice, azure.identity.aio)
    return credential


def _build(choice: IdentityChoice, identity: ModuleType) -> Any:
    """The credential from ``identity``: azure.identity or azure.identity.aio, which name
    their classes alike."""
    if choice.kind == "managed-identity":
        if choice.resource_id:
            return identity.ManagedIdentityCredential(
                identity_config={"resource_id": choice.resource_id}
            )
        return identity.ManagedIdentityCredential(client_id=choice.client_id)
    if choice.kind == "service-principal":
        return identity.ClientSecretCredential(
            choice.tenant_id, choice.client_id, choice.client_secret
        )
    if choice.client_id:
        return identity.DefaultAzureCredential(managed_identity_client_id=choice.client_id)
    return identity.DefaultAzureCredential()


def _properties(environ: Mapping[str, str], connection: str) -> dict[str, str]:
    """``<connection>__<property>`` settings by lower-case property, blank ones left out."""
    prefix = f"{connection}__".lower()
    found: dict[str, str] = {}
    for key, value in environ.items():
        if key.lower().startswith(prefix) and value.strip():
            found[key[len(prefix) :].lower()] = value.strip()
    return found
