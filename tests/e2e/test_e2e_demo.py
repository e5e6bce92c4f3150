"""`make demo` at a smaller size: every path of the pattern, and a report that proves the
invariants on the services' ledgers and the state store (S3, E8, E9, U4, C1, C2, R2)."""

import json
import subprocess
import sys
from pathlib import Path

from demo.client import Workload
from demo.run import DemoOptions, run_demo
from demo.showcase import SCRIPTED_PATHS

REPOSITORY = Path(__file__).resolve().parents[2]
STEPS = ("reserve-stock", "charge-payment", "ship-order")
REQUIRED_KEYS = {
    "orders",
    "final_states",
    "lost",
    "stuck",
    "dead_lettered",
    "status_messages",
    "in_progress_by_step",
    "double_side_effects",
    "stale_writes_refused",
    "compensations",
    "net_effects",
    "steps_after_compensation",
    "latency_ms",
    "step_latency_ms",
    "per_order",
    "supervisor",
    "broken_invariants",
}
TERMINAL = {
    "completed": "Processed",
    "failed": "Error",
    "compensated": "Compensated",
    "compensation-failed": "CompensationFailed",
}


async def test_the_default_mix_shows_every_path_and_keeps_every_invariant(tmp_path: Path) -> None:
    # Seed 99: eight orders (six on scripted paths), one resend, one conflict, one malformed.
    options = DemoOptions(orders=8, faults="default", seed=99, work_dir=tmp_path, progress=False)
    workload = Workload.generate(options.orders, options.seed)
    report = await run_demo(options)

    assert not report.failed, report.render()
    assert report.broken_invariants == []
    assert all(report.paths_shown.values()), report.paths_shown
    assert {p["orderId"]: p["reached"] for p in report.scripted_paths} == {
        path.order_id(99): path.expected for path in SCRIPTED_PATHS
    }
    states = report.final_states
    assert sum(states.values()) == 8
    assert {"Processed", "Error", "Compensated", "CompensationFailed"} <= set(states)
    # Compensation, on the state store's evidence; what Compensated orders did, all undone.
    assert report.compensations == {
        "started": states["Compensated"] + states["CompensationFailed"],
        "completed": states["Compensated"],
        "failed": states["CompensationFailed"],
    }
    assert set(report.net_effects) == {"stock", "payment", "shipping"}
    assert all(effects["net"] == 0 for effects in report.net_effects.values())
    assert report.net_effects["stock"]["released"] >= 2  # both scripted Compensated orders
    assert report.net_effect_orders == []
    assert report.steps_after_compensation == []
    # That check covers every order that compensated: each record carries its start.
    assert len(report.compensation_began) == report.compensations["started"]
    assert sum(report.double_side_effects.values()) == 0
    # The supervisor retried twice for the lost shipment and once for the hung reservation,
    # gave the shipment up, and resumed the stalled refund; agents retried the 503s.
    assert report.supervisor["retries"] >= 3
    assert report.supervisor["gave_up"] >= 1
    assert report.supervisor["compensations_resumed"] >= 1
    assert report.agent_retries >= 4
    # What the client heard: one `received` and one final status per order, and an
    # `in-progress` for every step that completed.
    heard = report.status_messages
    assert heard["received"] == 8
    for status, state in TERMINAL.items():
        assert heard.get(status, 0) == states.get(state, 0), status
    assert sum(report.in_progress_by_step.values()) == heard["in-progress"]
    assert set(report.in_progress_by_step) == set(STEPS)
    assert report.operator_alerts["order-error"] == states["Error"]
    assert report.operator_alerts["compensation-failed"] == states["CompensationFailed"]
    orders_dead = report.dead_letter_reasons["orders"]
    assert orders_dead == {"InvalidMessage": workload.count("malformed"), "OrderConflict": 1}
    assert set(report.step_latency_ms) == set(STEPS)
    assert all(latency["p50"] is not None for latency in report.step_latency_ms.values())
    assert report.latency_ms["p50"] is not None


def test_the_command_without_faults_processes_every_order_and_exits_zero(tmp_path: Path) -> None:
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
    assert report["status_messages"] == {"received": 10, "in-progress": 30, "completed": 10}
    assert report["in_progress_by_step"] == {step: 10 for step in STEPS}
    assert report["compensations"] == {"started": 0, "completed": 0, "failed": 0}
    assert report["scripted_paths"] == []
    assert (report["double_side_effects"], report["steps_after_compensation"]) == (0, 0)
    assert report["broken_invariants"] == []
    assert set(report["latency_ms"]) == {"p50", "p95"}
    assert set(report["step_latency_ms"]) == set(STEPS)
    assert set(report["per_order"]) >= {"store_reads", "store_writes", "messages"}
    assert "Result: passed" in completed.stdout
    assert "operator console, while the demo runs: http://127.0.0.1:" in completed.stderr
    assert "/api/console?code=" in completed.stderr
