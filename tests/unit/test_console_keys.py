"""A local run's operator keys (E8): made once into the git-ignored directory, and a
CONSOLE_KEYS setting that names them by hash only."""

from __future__ import annotations

import json
from pathlib import Path

from config import Settings
from domain.operator_access import AUTH_KEYS, Caller, Role, authorise
from tools.console_keys import KEYS_FILE, local_keys, main


def test_e8_the_local_keys_are_made_once_and_the_setting_holds_no_key(tmp_path: Path) -> None:
    keys = local_keys(tmp_path)
    assert local_keys(tmp_path) == keys
    assert keys.read != keys.act
    assert keys.read not in keys.setting
    assert keys.act not in keys.setting
    settings = Settings.from_environ({"CONSOLE_KEYS": keys.setting})

    def caller(key: str, needed: Role) -> Caller:
        headers = {"x-console-key": key}
        return authorise(headers, needed, mode=AUTH_KEYS, keys=settings.console_keys)

    assert caller(keys.read, Role.READ) == Caller("local-read", Role.READ)
    assert caller(keys.act, Role.ACT) == Caller("local-act", Role.ACT)


def test_e8_the_command_writes_console_keys_into_a_local_settings_file(tmp_path: Path) -> None:
    settings_file = tmp_path / "local.settings.json"
    settings_file.write_text(json.dumps({"Values": {"ORDERS_QUEUE": "orders"}}), "utf-8")
    assert main(["--dir", str(tmp_path / "devhost"), "--settings", str(settings_file)]) == 0
    values = json.loads(settings_file.read_text("utf-8"))["Values"]
    assert values["ORDERS_QUEUE"] == "orders"
    assert values["CONSOLE_KEYS"] == local_keys(tmp_path / "devhost").setting
    assert (tmp_path / "devhost" / KEYS_FILE).stat().st_mode & 0o077 == 0
