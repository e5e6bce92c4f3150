"""Who may use the operator console, and for what (E8, C2, C3): the read and act roles.

Reading (the order lists, a timeline, the dead letters) needs the `READ` role; the actions
that change an order or a dead letter (resubmit, cancel, retry compensation, dead-letter
resubmit and discard) need `ACT`, which includes reading. `authorise` finds the caller in a
request's headers in one of two ways, chosen by the CONSOLE_AUTH setting:

- ``keys``: a named operator key in the ``X-Console-Key`` header, held against CONSOLE_KEYS,
  which keeps each key's name, role and SHA-256, never the key itself;
- ``easyauth``: the ``X-MS-CLIENT-PRINCIPAL`` header that App Service authentication sets
  after it validated the caller's Entra ID token, with the app roles `READ_APP_ROLE` and
  `ACT_APP_ROLE`. Without App Service authentication in front any client can write that
  header, so it is read in this mode only.

The caller's name (the key's name, or ``principal:<object id>``, a pseudonymous id rather
than an e-mail address, C3) is what the console's audit lines name.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

AUTH_KEYS = "keys"
AUTH_EASYAUTH = "easyauth"
KEY_HEADER = "x-console-key"
PRINCIPAL_HEADER = "x-ms-client-principal"
READ_APP_ROLE = "Console.Reader"
ACT_APP_ROLE = "Console.Operator"
KEY_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
# The claim types App Service uses for app roles and the object id, in either spelling it
# may give them (short JWT names or the WS-Federation URIs).
_ROLE_CLAIMS = frozenset({"roles", "http://schemas.microsoft.com/ws/2008/06/identity/claims/role"})
_OBJECT_ID_CLAIMS = ("oid", "http://schemas.microsoft.com/identity/claims/objectidentifier")
_MAX_PRINCIPAL_HEADER = 32_000


class Role(StrEnum):
    READ = "read"
    ACT = "act"


class OperatorKeysError(ValueError):
    """CONSOLE_KEYS is not a list of ``name:role:sha256`` entries."""


@dataclass(frozen=True)
class OperatorKey:
    """One named operator key as CONSOLE_KEYS declares it: the SHA-256 of the key, hex."""

    name: str
    role: Role
    sha256: str


@dataclass(frozen=True)
class Caller:
    """Who made a console call, as the audit lines name them, and the role they hold."""

    name: str
    role: Role

    def may(self, needed: Role) -> bool:
        return self.role is Role.ACT or needed is Role.READ


class Denied(Exception):
    """The call may not go on: 401 without a credential the app knows, 403 when the
    credential's role does not allow the call."""

    def __init__(self, status: int, reason: str, who: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.who = who


def key_digest(key: str) -> str:
    """The SHA-256 of an operator key, hex: what CONSOLE_KEYS keeps instead of the key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_entry(name: str, role: Role, key: str) -> str:
    """One CONSOLE_KEYS entry for `key`."""
    return f"{name}:{role.value}:{key_digest(key)}"


def parse_keys(text: str) -> tuple[OperatorKey, ...]:
    """CONSOLE_KEYS: comma-separated ``name:role:sha256`` entries, names unique."""
    keys: list[OperatorKey] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        name, _, rest = entry.partition(":")
        role_text, _, digest = rest.partition(":")
        if not KEY_NAME.match(name):
            raise OperatorKeysError(
                f"the key name {name!r} must be 1 to 64 letters, digits, '.', '_' or '-'"
            )
        if role_text not in {role.value for role in Role}:
            raise OperatorKeysError(f"the key {name!r} has role {role_text!r}: read or act")
        if not _DIGEST.match(digest.lower()):
            raise OperatorKeysError(
                f"the key {name!r} needs the SHA-256 of the key as 64 hex digits, not the key"
            )
        if any(key.name == name for key in keys):
            raise OperatorKeysError(f"the key name {name!r} is given twice")
        keys.append(OperatorKey(name, Role(role_text), digest.lower()))
    return tuple(keys)


def authorise(
    headers: Mapping[str, str], needed: Role, *, mode: str, keys: Sequence[OperatorKey]
) -> Caller:
    """The caller of a console call that needs `needed`, or `Denied`. `headers` are keyed by
    lower-case name."""
    caller = _principal(headers) if mode == AUTH_EASYAUTH else _keyholder(headers, keys)
    if not caller.may(needed):
        raise Denied(
            403,
            f"{caller.name} holds the {caller.role.value} role; this action needs the "
            f"{needed.value} role",
            caller.name,
        )
    return caller


def _keyholder(headers: Mapping[str, str], keys: Sequence[OperatorKey]) -> Caller:
    presented = headers.get(KEY_HEADER, "")
    if not presented:
        raise Denied(401, "the console needs an operator key in the X-Console-Key header")
    digest = key_digest(presented)
    found: OperatorKey | None = None
    # Every entry is compared, so the time taken does not tell which entry came close.
    for key in keys:
        if hmac.compare_digest(digest, key.sha256):
            found = key
    if found is None:
        raise Denied(401, "the operator key is not one of CONSOLE_KEYS")
    return Caller(found.name, found.role)


def _principal(headers: Mapping[str, str]) -> Caller:
    encoded = headers.get(PRINCIPAL_HEADER, "")
    if not encoded:
        raise Denied(401, "no signed-in principal: App Service authentication sent none")
    try:
        if len(encoded) > _MAX_PRINCIPAL_HEADER:
            raise ValueError("too long")
        principal = json.loads(base64.b64decode(encoded, validate=True))
        claims = principal["claims"]
        role_claim = principal.get("role_typ")
        pairs = [(str(claim["typ"]), str(claim["val"])) for claim in claims]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise Denied(401, "the client principal header is not App Service's") from None
    object_id = next((val for name in _OBJECT_ID_CLAIMS for typ, val in pairs if typ == name), "")
    if not object_id:
        raise Denied(401, "the signed-in principal has no object id claim")
    roles = {val for typ, val in pairs if typ in _ROLE_CLAIMS or typ == role_claim}
    name = f"principal:{object_id}"
    if ACT_APP_ROLE in roles:
        return Caller(name, Role.ACT)
    if READ_APP_ROLE in roles:
        return Caller(name, Role.READ)
    raise Denied(403, f"{name} holds neither app role {READ_APP_ROLE} nor {ACT_APP_ROLE}", name)
