"""The demo as an end-to-end test at a smaller size (issue 4: `make demo`)."""

import json
import subprocess
import sys
from pathlib import Path

from demo.client import Workload
from demo.run import DemoOptions, run_demo

REPOSITORY = Path(__file__).resolve().parents[2]
REQUIRED_KEYS = {
    "orders",
    "final_states",
    "lost",
    "stuck",
    "dead_lettered",
    "status_messages",
    "double_side_effects",
    "stale_writes_refused",
    "latency_ms",
    "per_order",
}


async def test_demo_under_the_default_fault_mix_loses_nothing(tmp_path: Path) -> None:
    options = DemoOptions(orders=30, faults="default", seed=11, work_dir=tmp_path, progress=False)
    workload = Workload.generate(options.orders, options.seed)
    report = await run_demo(options)

    assert not report.failed, report.render()
    assert sum(report.final_states.values()) == 30
    assert set(report.final_states) <= {"Processed", "Error"}
    # Every valid order heard `received` once (resends de-duplicate) and one final status.
    assert report.status_messages["received"] == 30
    finished = report.status_messages.get("completed", 0) + report.status_messages.get("failed", 0)
    assert finished == 30
    assert report.status_messages.get("completed", 0) == report.final_states.get("Processed", 0)
    orders_dead = report.dead_letter_reasons.get("orders", {})
    assert orders_dead.get("InvalidMessage", 0) == workload.count("malformed")
    assert orders_dead.get("OrderConflict", 0) == workload.count("conflict")
    assert report.per_order["store_writes"] >= 5
    assert report.latency_ms["p50"] is not None


def test_the_command_writes_the_report_and_exits_zero(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "devhost",
            "demo",
            "--orders",
            "10",
            "--faults",
            "none",
            "--seed",
            "2",
            "--report",
            str(report_path),
            "--no-progress",
            "--work-dir",
            str(tmp_path / "run"),
        ],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert set(report) >= REQUIRED_KEYS
    assert (report["orders"], report["lost"], report["stuck"]) == (10, 0, 0)
    assert report["final_states"] == {"Processed": 10}
    assert report["double_side_effects"] == 0
    assert set(report["latency_ms"]) == {"p50", "p95"}
    assert set(report["per_order"]) >= {"store_reads", "store_writes", "messages"}
    assert "Result: passed" in completed.stdout
