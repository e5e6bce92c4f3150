"""`make demo` at a smaller size: every path of the pattern, and a report that proves the
invariants on the services' ledgers and the state store (S3, E8, E9, U4, C1, C2, R2); the
report's metrics, merged from the run's telemetry file, agree with that evidence (C9); and
`make console` serves the operator console over the demo's orders (E8)."""

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from devhost import child_process

from tools import cost
from tools.demo.client import Workload
from tools.demo.run import DemoOptions, run_demo
from tools.demo.showcase import SCRIPTED_PATHS

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
CONSOLE_READY_SECONDS = 60.0
TERMINAL = {
    "completed": "Processed",
    "failed": "Error",
    "compensated": "Compensated",
    "compensation-failed": "CompensationFailed",
}


async def test_the_default_mix_shows_every_path_and_keeps_every_invariant(tmp_path: Path) -> None:
    # Seed 99: eight orders (six on scripted paths), one resend, one conflict, one malformed.
    options = DemoOptions(
        orders=8,
        faults="default",
        seed=99,
        work_dir=tmp_path / "run",
        progress=False,
        telemetry_export=str(tmp_path / "telemetry.jsonl"),
    )
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
    # Consumer lag, sampled from the broker: nobody consumes the alerts, so they stay there.
    assert report.consumer_lag["operator-alerts"]["final"] == sum(report.operator_alerts.values())
    assert report.consumer_lag["orders"]["final"] == 0

    # The app's own metrics, merged over every worker process and export, tell the same story
    # as the state store, the client and the dead-letter queues (C9).
    counted = report.metrics["orders"]
    assert counted == {
        "received": 8,
        "completed": states["Processed"],
        "failed": states["Error"],
        "compensated": states["Compensated"],
        "compensation_failed": states["CompensationFailed"],
        "rejected": 0,
    }
    latency = report.metrics["order_latency"]
    assert latency["all"]["count"] == 8
    assert {state: latency[state]["count"] for state in states} == states
    assert latency["all"]["p50_ms"] <= latency["all"]["p95_ms"]
    assert set(report.metrics["step_latency"]) == set(STEPS)
    assert sum(report.metrics["step_retries"].values()) >= 1
    assert report.metrics["dead_letters"] == report.dead_letter_reasons
    assert report.metrics["supervisor"]["giveups"] == report.supervisor["gave_up"]
    assert report.metrics["supervisor"]["items_read"] >= 1
    # Failures by step and reason: the scripted refusals at each step (E8, C1) and the
    # deadlines that expired for the hung reservation and the lost shipment (U1).
    failures = report.metrics["step_failures"]
    assert set(failures) <= set(STEPS)
    for step in STEPS:
        assert failures[step]["failed"] >= 1, failures
    assert failures["reserve-stock"]["deadline-expired"] >= 1, failures
    assert failures["ship-order"]["deadline-expired"] >= 2, failures
    # The backlog gauges hold what the starter's last run counted and are sampled at each
    # export (every 5 s). The hung reservation stays unfinished through three 10 s deadlines,
    # so exports see it; whether one falls in the second an order waits Pending is timing,
    # so those two are checked as exported and in bounds here, and their values on the
    # virtual clock in tests/integration/stores/test_service_metrics.py.
    backlog = report.metrics["backlog"]
    assert 1 <= backlog["unfinished"]["max"] <= 8
    assert 0 <= backlog["pending"]["max"] <= 8
    assert backlog["oldest_pending_age_s"]["max"] >= 0


@dataclass(frozen=True)
class CommandRun:
    completed: subprocess.CompletedProcess[str]
    work_dir: Path
    report: Path
    telemetry: Path
    ran: tuple[float, float]
    """The command's start and end on the machine's monotonic clock, as this test saw them."""


@pytest.fixture(scope="module")
def command_run(tmp_path_factory: pytest.TempPathFactory) -> CommandRun:
    """`python -m tools.demo` as `make demo` runs it, at ten orders without faults."""
    root = tmp_path_factory.mktemp("demo-command")
    work_dir, report, telemetry = root / "run", root / "report.json", root / "telemetry.jsonl"
    began = time.monotonic()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.demo",
            "--orders",
            "10",
            "--faults",
            "none",
            "--seed",
            "2",
            "--report",
            str(report),
            "--no-progress",
            "--work-dir",
            str(work_dir),
            "--telemetry-export",
            str(telemetry),
        ],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return CommandRun(completed, work_dir, report, telemetry, (began, time.monotonic()))


def test_the_command_prints_the_cost_of_1000_orders_from_the_runs_counts_and_the_cost_at_rest(
    command_run: CommandRun,
) -> None:
    completed = command_run.completed
    assert completed.returncode == 0, completed.stdout + completed.stderr
    section = json.loads(command_run.report.read_text(encoding="utf-8"))["cost"]
    prices = cost.load_prices()
    orders = {line["meter"]: line for line in section["orders"]["lines"]}
    assert set(orders) == {meter["meter"] for meter in prices["per_order"].values()}
    counted = {line["meter"] for line in orders.values() if line["quantity"] is not None}
    assert counted == {
        prices["per_order"][key]["meter"]
        for key in (
            "cosmos_request_units",
            "servicebus_operations",
            "function_executions",
            "dts_actions",
        )
    }
    assert all(orders[meter]["quantity"] > 0 for meter in counted), orders
    # A fault-free three-step order: its start, each of its four activities scheduled and
    # answered, and each step's answer raised as an event, from the run's histories.
    dts = orders[prices["per_order"]["dts_actions"]["meter"]]
    assert dts["quantity"] >= 1000 * (1 + 4 * 2 + 3)
    assert section["orders"]["total"] > 0
    assert section["orders"]["pricesAsOf"] == prices["as_of"]
    at_rest = {line["meter"] for line in section["atRest"]["lines"]}
    assert all(any(meter.endswith(name) for meter in at_rest) for name in cost.default_schedules())
    assert "Azure cost of 1,000 orders (" in completed.stdout
    assert "Cost at rest per month of the defaults (" in completed.stdout


def test_the_command_without_faults_processes_every_order_and_exits_zero(
    command_run: CommandRun,
) -> None:
    completed = command_run.completed
    assert completed.returncode == 0, completed.stdout + completed.stderr
    report = json.loads(command_run.report.read_text(encoding="utf-8"))
    assert set(report) >= REQUIRED_KEYS
    assert (report["orders"], report["lost"], report["stuck"]) == (10, 0, 0)
    assert report["final_states"] == {"Processed": 10}
    # What the benchmark checks a run by: the steps and the agent shape that ran.
    settings = report["settings"]
    assert (settings["order_steps"], settings["agent_transport"]) == (list(STEPS), "servicebus")
    # ...and the part of the run whose CPU it counts, on the clock every process shares.
    window = report["measured_window"]
    assert command_run.ran[0] < window["start"] < window["end"] < command_run.ran[1]
    assert window["end"] - window["start"] == pytest.approx(report["duration_seconds"], abs=0.01)
    assert report["status_messages"] == {"received": 10, "in-progress": 30, "completed": 10}
    assert report["in_progress_by_step"] == {step: 10 for step in STEPS}
    assert report["compensations"] == {"started": 0, "completed": 0, "failed": 0}
    assert report["scripted_paths"] == []
    assert (report["double_side_effects"], report["steps_after_compensation"]) == (0, 0)
    assert report["broken_invariants"] == []
    assert set(report["latency_ms"]) == {"p50", "p95"}
    assert set(report["step_latency_ms"]) == set(STEPS)
    assert set(report["per_order"]) >= {"store_reads", "store_writes", "messages"}
    assert report["metrics"]["orders"]["completed"] == 10
    assert report["consumer_lag"]["orders"]["final"] == 0
    assert "Result: passed" in completed.stdout
    assert "operator console, while the demo runs: http://127.0.0.1:" in completed.stderr
    assert "/api/console?code=" in completed.stderr
    # What the run ends with: the metrics, the trace file and where to open the console.
    assert "Metrics (merged from the telemetry file of 1 app process(es)):" in completed.stdout
    assert "  orders: compensated 0, compensation_failed 0, completed 10" in completed.stdout
    assert "bucket-estimated" in completed.stdout
    assert "Consumer lag (active messages, max/final):" in completed.stdout
    last = completed.stdout.splitlines()[-2:]
    assert last[0].startswith(
        f"Traces and metrics (OTLP JSON lines) written to {command_run.telemetry}"
    )
    key = json.loads((command_run.work_dir / "devhost" / "keys.json").read_text())["function"]
    act = json.loads((command_run.work_dir / "devhost" / "console-keys.json").read_text())["act"]
    makefile = (REPOSITORY / "Makefile").read_text(encoding="utf-8")
    assert "--work-dir $(DEMO_DIR)" in makefile
    assert "\t$(BIN)/python -m tools.demo.console --work-dir $(DEMO_DIR)\n" in makefile
    assert last[1] == (
        "Operator console over this run's orders: `make console` (or python -m tools.demo.console "
        f"--work-dir {command_run.work_dir}), then open "
        f"http://127.0.0.1:7071/api/console?code={key}#key={act}"
    )


@pytest.fixture
def console(command_run: CommandRun) -> Iterator[str]:
    """`make console`'s command over the demo's data, on a free port: its console URL."""
    assert command_run.completed.returncode == 0, command_run.completed.stderr
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tools.demo.console",
            "--log-level",
            "WARNING",
            "--work-dir",
            str(command_run.work_dir),
            "--http-port",
            "0",
        ],
        cwd=REPOSITORY,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines = child_process.first_lines(process, 1, CONSOLE_READY_SECONDS)
        assert lines, f"demo.console did not say where the console is (exit {process.poll()})"
        yield lines[0].rsplit(" ", 1)[1]
    finally:
        child_process.stop(process)


def test_make_console_serves_the_console_over_the_demos_orders(
    console: str, command_run: CommandRun
) -> None:
    base, keys = console.split("?code=")
    key, operator_key = keys.split("#key=")
    assert base.endswith("/api/console")
    with urllib.request.urlopen(
        urllib.request.Request(
            f"{base}/orders?state=Processed&pageSize=50&code={key}",
            headers={"X-Console-Key": operator_key},
        ),
        timeout=30,
    ) as answer:
        listed = json.loads(answer.read())
    report = json.loads(command_run.report.read_text(encoding="utf-8"))
    assert len(listed["orders"]) == report["final_states"]["Processed"] == 10
    assert {order["ProcessState"] for order in listed["orders"]} == {"Processed"}
