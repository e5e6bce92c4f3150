"""What the demo keeps for `make console` and what it prints about it (E8): the settings of a
SQLite run without its broker address, telemetry or Cosmos DB key; nothing for a run whose
store does not outlive it, and a line that says so."""

from __future__ import annotations

import json
from pathlib import Path

from tools.demo.console import SETTINGS_FILE, command_line, keep_settings, where_to_open


def test_a_sqlite_run_keeps_its_settings_but_not_its_broker_telemetry_or_keys(
    tmp_path: Path,
) -> None:
    values = {
        "STATE_STORE": "sqlite",
        "ORDER_STEPS": "reserve-stock,charge-payment,ship-order",
        "ServiceBusConnection": "Endpoint=sb://127.0.0.1:1;SharedAccessKey=local",
        "DEVHOST_TELEMETRY_EXPORT": "telemetry.jsonl",
        "PYTHON_ENABLE_OPENTELEMETRY": "true",
        "CosmosConnection": "AccountEndpoint=https://x/;AccountKey=secret",
    }
    assert keep_settings(tmp_path, values)
    kept = json.loads((tmp_path / SETTINGS_FILE).read_text(encoding="utf-8"))
    assert kept == {
        "STATE_STORE": "sqlite",
        "ORDER_STEPS": "reserve-stock,charge-payment,ship-order",
    }
    (tmp_path / "devhost").mkdir()
    (tmp_path / "devhost" / "keys.json").write_text(
        json.dumps({"function": "fkey", "master": "mkey"}), encoding="utf-8"
    )
    (tmp_path / "devhost" / "console-keys.json").write_text(
        json.dumps({"read": "rkey", "act": "akey"}), encoding="utf-8"
    )
    assert where_to_open(tmp_path) == [
        "Operator console over this run's orders: `make console` (or python -m tools.demo.console "
        f"--work-dir {tmp_path}), then open "
        "http://127.0.0.1:7071/api/console?code=fkey#key=akey"
    ]


def test_a_run_on_cosmos_or_in_a_temporary_directory_is_not_kept_and_the_demo_says_so(
    tmp_path: Path,
) -> None:
    assert not keep_settings(tmp_path, {"STATE_STORE": "cosmos"})
    assert not (tmp_path / SETTINGS_FILE).exists()
    [cosmos] = where_to_open(tmp_path)
    assert "did not outlive it" in cosmos
    [temporary] = where_to_open(None)
    assert "temporary directory" in temporary
    assert "--work-dir DIR" in temporary


def test_the_command_line_names_a_port_only_when_it_is_not_the_default() -> None:
    assert command_line(Path("d")) == "python -m tools.demo.console --work-dir d"
    assert command_line(Path("d"), 8080).endswith("--work-dir d --http-port 8080")
