"""The demo on the Cosmos adapter: `make demo BACKEND=cosmos` and the environment.

`--backend cosmos` starts the local Cosmos DB API server itself and runs the default fault
mix there, every path included (supervisor retries and give-up, compensation, U2-U4, C1,
C2); without it, the demo runs on whatever Cosmos DB the environment names (here a server
the test starts, standing in for the emulator or an account), creates its containers there,
and keeps a database only when COSMOS_DATABASE names it: otherwise each run has a fresh one
and drops it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from azure.cosmos import CosmosClient

from tests.support.cosmos_server import CosmosServer
from tools.demo.pipeline import pipeline_settings_from

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

REPOSITORY = Path(__file__).resolve().parents[2]
DEMO_TIMEOUT_SECONDS = 240
SDK_TIMEOUT_SECONDS = 30


def run_demo(
    report_path: Path,
    orders: int,
    *arguments: str,
    faults: str = "none",
    environ: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`python -m tools.demo` as a user runs it, with no pipeline settings but `environ`'s."""
    outside = {
        name: value
        for name, value in os.environ.items()
        if name not in pipeline_settings_from(os.environ)
    }
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.demo",
            "--orders",
            str(orders),
            "--faults",
            faults,
            "--no-progress",
            "--report",
            str(report_path),
            *arguments,
        ],
        cwd=REPOSITORY,
        env={**outside, **(environ or {})},
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_SECONDS,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed, json.loads(report_path.read_text(encoding="utf-8"))


def test_backend_cosmos_runs_every_path_of_the_demo_on_a_cosmos_server_it_starts(
    tmp_path: Path,
) -> None:
    completed, report = run_demo(
        tmp_path / "report.json", 8, "--backend", "cosmos", "--seed", "3", faults="default"
    )

    assert report["settings"]["state_store"] == "cosmos"
    assert report["broken_invariants"] == []
    assert (report["lost"], report["stuck"], report["double_side_effects"]) == (0, 0, 0)
    assert all(p["reached"] == p["expected"] for p in report["scripted_paths"])
    states = report["final_states"]
    assert {"Processed", "Error", "Compensated", "CompensationFailed"} <= set(states)
    assert report["compensations"] == {
        "started": states["Compensated"] + states["CompensationFailed"],
        "completed": states["Compensated"],
        "failed": states["CompensationFailed"],
    }
    assert all(effects["net"] == 0 for effects in report["net_effects"].values())
    assert report["steps_after_compensation"] == 0
    # The supervisor's sweeps over the Cosmos recovery index retried, gave up, resumed.
    assert report["supervisor"]["retries"] >= 3
    assert report["supervisor"]["gave_up"] >= 1
    assert report["supervisor"]["compensations_resumed"] >= 1
    assert report["status_messages"]["received"] == 8
    assert sum(report["in_progress_by_step"].values()) == report["status_messages"]["in-progress"]
    assert report["per_order"]["request_charge"] > 0
    # The cost estimates request units from reads and writes and shows what the server said.
    request_units = report["cost"]["orders"]["lines"][0]
    assert request_units["quantity"] > 0
    assert "the run's store answered" in request_units["basis"]
    assert "request units" in completed.stdout
    assert "Result: passed" in completed.stdout


def test_the_demo_runs_on_the_cosmos_db_the_environment_names(tmp_path: Path) -> None:
    with CosmosServer() as server:
        environ = {"STATE_STORE": "cosmos", "CosmosConnection": server.connection_string}
        _, kept = run_demo(
            tmp_path / "kept.json", 5, "--seed", "4", environ={**environ, "COSMOS_DATABASE": "kept"}
        )
        _, fresh = run_demo(tmp_path / "fresh.json", 5, "--seed", "4", environ=environ)

        with CosmosClient.from_connection_string(server.connection_string) as client:
            databases = {d["id"] for d in client.list_databases(timeout=SDK_TIMEOUT_SECONDS)}
            database = client.get_database_client("kept")
            containers = {c["id"] for c in database.list_containers(timeout=SDK_TIMEOUT_SECONDS)}
            states = list(
                database.get_container_client("state").query_items(
                    # State records only: the dead-letter watcher's marks have no ProcessState.
                    "SELECT c.OrderID, c.ProcessState FROM c WHERE IS_DEFINED(c.ProcessState)",
                    enable_cross_partition_query=True,
                    timeout=SDK_TIMEOUT_SECONDS,
                )
            )

    assert kept["settings"]["state_store"] == fresh["settings"]["state_store"] == "cosmos"
    assert kept["final_states"] == fresh["final_states"] == {"Processed": 5}
    # The second run used a database of its own, dropped when it stopped; the first kept its.
    assert databases == {"kept"}
    assert {"state", "orders"} <= containers
    assert sorted(s["OrderID"] for s in states) == [f"order-4-{i:05d}" for i in range(5)]
    assert {s["ProcessState"] for s in states} == {"Processed"}
