"""Who may use the operator console (E8, C2, C3): named keys with the read or act role, or
App Service authentication's principal and app roles, trusted only when it is in front."""

from __future__ import annotations

import base64
import json

import pytest

from config import Settings, SettingsError
from domain.operator_access import (
    ACT_APP_ROLE,
    AUTH_EASYAUTH,
    AUTH_KEYS,
    READ_APP_ROLE,
    Caller,
    Denied,
    OperatorKeysError,
    Role,
    authorise,
    key_entry,
    parse_keys,
)

READ_KEY, ACT_KEY = "read-secret", "act-secret"
KEYS = parse_keys(
    f"{key_entry('alice-laptop', Role.READ, READ_KEY)},{key_entry('oncall', Role.ACT, ACT_KEY)}"
)
OBJECT_ID = "6f1c2e0a-1111-4222-8333-944445555666"


def principal_header(*roles: str, object_id: str = OBJECT_ID) -> str:
    """An X-MS-CLIENT-PRINCIPAL as App Service sets it for an Entra ID caller."""
    role_typ = "http://schemas.microsoft.com/ws/2008/06/identity/claims/role"
    claims = [
        {"typ": "http://schemas.microsoft.com/identity/claims/objectidentifier", "val": object_id},
        {"typ": "name", "val": "Alice Example"},
        {"typ": "preferred_username", "val": "alice@example.com"},
        *({"typ": role_typ, "val": role} for role in roles),
    ]
    document = {"auth_typ": "aad", "claims": claims, "name_typ": "name", "role_typ": role_typ}
    return base64.b64encode(json.dumps(document).encode()).decode()


def by_keys(headers: dict[str, str], needed: Role) -> Caller:
    return authorise(headers, needed, mode=AUTH_KEYS, keys=KEYS)


def by_principal(headers: dict[str, str], needed: Role) -> Caller:
    return authorise(headers, needed, mode=AUTH_EASYAUTH, keys=KEYS)


def denied(call: object, *args: object) -> Denied:
    with pytest.raises(Denied) as raised:
        call(*args)  # type: ignore[operator]
    return raised.value


def test_e8_a_read_key_reads_and_an_act_key_reads_and_acts_each_under_its_name() -> None:
    assert by_keys({"x-console-key": READ_KEY}, Role.READ) == Caller("alice-laptop", Role.READ)
    assert by_keys({"x-console-key": ACT_KEY}, Role.READ) == Caller("oncall", Role.ACT)
    assert by_keys({"x-console-key": ACT_KEY}, Role.ACT) == Caller("oncall", Role.ACT)


def test_e8_a_read_key_on_an_action_is_forbidden_with_the_reason_and_its_name() -> None:
    refused = denied(by_keys, {"x-console-key": READ_KEY}, Role.ACT)
    assert refused.status == 403
    assert refused.who == "alice-laptop"
    assert "read role" in refused.reason
    assert "act role" in refused.reason


@pytest.mark.parametrize("headers", [{}, {"x-console-key": ""}, {"x-console-key": "guess"}])
def test_e8_no_key_or_a_wrong_key_is_unauthorised(headers: dict[str, str]) -> None:
    for needed in Role:
        refused = denied(by_keys, headers, needed)
        assert refused.status == 401
        assert refused.who is None


def test_e8_a_forged_principal_header_is_ignored_without_easy_auth() -> None:
    forged = {"x-ms-client-principal": principal_header(ACT_APP_ROLE)}
    assert denied(by_keys, forged, Role.READ).status == 401
    # With a read key the forged act role adds nothing.
    assert denied(by_keys, {**forged, "x-console-key": READ_KEY}, Role.ACT).status == 403


def test_e8_c3_behind_easy_auth_the_app_roles_decide_and_the_caller_is_the_object_id() -> None:
    reader = {"x-ms-client-principal": principal_header(READ_APP_ROLE)}
    operator = {"x-ms-client-principal": principal_header(READ_APP_ROLE, ACT_APP_ROLE)}
    assert by_principal(reader, Role.READ) == Caller(f"principal:{OBJECT_ID}", Role.READ)
    assert by_principal(operator, Role.ACT) == Caller(f"principal:{OBJECT_ID}", Role.ACT)
    refused = denied(by_principal, reader, Role.ACT)
    assert refused.status == 403
    # The audit names the pseudonymous object id, never the e-mail or display name (C3).
    assert "alice" not in refused.reason.lower()
    assert "alice" not in str(refused.who).lower()
    assert (
        denied(by_principal, {"x-ms-client-principal": principal_header()}, Role.READ).status == 403
    )


def test_e8_behind_easy_auth_a_key_alone_or_a_broken_principal_is_unauthorised() -> None:
    assert denied(by_principal, {"x-console-key": ACT_KEY}, Role.READ).status == 401
    for broken in ("not base64!", base64.b64encode(b"[1, 2]").decode(), "e30="):
        assert denied(by_principal, {"x-ms-client-principal": broken}, Role.READ).status == 401
    no_id = principal_header(ACT_APP_ROLE, object_id="")
    assert denied(by_principal, {"x-ms-client-principal": no_id}, Role.READ).status == 401


@pytest.mark.parametrize(
    "text",
    [
        f"oncall:act:{ACT_KEY}",
        "oncall:admin:" + "0" * 64,
        "on call:act:" + "0" * 64,
        f"{key_entry('a', Role.ACT, 'x')},{key_entry('a', Role.READ, 'y')}",
    ],
)
def test_e8_operator_keys_hold_unique_names_a_role_and_a_digest_never_the_key(text: str) -> None:
    with pytest.raises(OperatorKeysError):
        parse_keys(text)
    with pytest.raises(SettingsError, match="CONSOLE_KEYS"):
        Settings.from_environ({"CONSOLE_KEYS": text})


def test_e8_the_settings_read_the_mode_and_the_keys() -> None:
    settings = Settings.from_environ(
        {"CONSOLE_AUTH": "easyauth", "CONSOLE_KEYS": key_entry("oncall", Role.ACT, ACT_KEY)}
    )
    assert settings.console_auth == AUTH_EASYAUTH
    assert [key.name for key in settings.console_keys] == ["oncall"]
    assert Settings().console_auth == AUTH_KEYS
    assert Settings().console_keys == ()
    with pytest.raises(SettingsError, match="CONSOLE_AUTH"):
        Settings.from_environ({"CONSOLE_AUTH": "none"})
