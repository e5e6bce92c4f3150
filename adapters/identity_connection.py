"""The credential of an identity-based connection, chosen by the Functions host's rules.

`identity_choice` reads a connection's ``<CONNECTION>__<property>`` settings (any case; an
empty value is unset) into an `IdentityChoice` (a managed identity, a service principal or
``DefaultAzureCredential``), or raises `ConnectionSettingsError` naming a setting the app
cannot honour; `sync_credential` and `async_credential` build it. The forms:
docs/deployment.md, "Identity and roles".
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
