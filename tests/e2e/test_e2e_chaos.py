"""A small seeded `make chaos` run: every kind of fault and crash at least once, and every
invariant of `chaos.invariants` held (C1-C10, D3, D4, E2-E9, R1, R2, S3, U4, U6), on the
embedded SQLite stores and on the Cosmos DB adapter against a local Cosmos DB API server (the
production store: its ETag-conditional writes and deadline index under the same crashes).

The pieces run as processes: the broker with its journal, the simulated services with their
ledger journal, the scheduler's devhost, the agents' devhost and a second scheduler over the
same store. While orders go in, the devhosts, the broker and the services are killed with
SIGKILL and restarted, a starter dies between claim and start, and the agents' answers are
lost, duplicated, delayed and reordered on their way; a few orders' compensations are scripted
to fail for good, hang or answer past their deadline (`chaos.schedule.compensation_script`).
The evidence is read from the ledgers, the state store and the queues after the run, never
from the app's counters: orders ended `CompensationFailed` and stalled compensations resumed
are the state store's (C2, U4); the faults split between actions and compensations and the
answers that came after their deadline (E2, E6) are the services' and the relay's. The JSON
report and its page are left in the test's temporary directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from config import STATE_STORES
from tools.chaos.report_page import write_page
from tools.chaos.run import ChaosOptions, run_chaos, write_report
from tools.chaos.schedule import CrashKind
from tools.cost import load_prices
from tools.simulators.services import FaultKind

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(420),
    pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning"),
]

ORDERS = 200
RATE = 4.0  # orders per second: fifty seconds of submissions, the crashes among them


@pytest.mark.parametrize("backend", STATE_STORES)
async def test_a_seeded_chaos_run_loses_doubles_and_leaves_half_undone_nothing(
    tmp_path: Path, backend: str
) -> None:
    report = await run_chaos(
        ChaosOptions(
            orders=ORDERS,
            seed=7,
            rate=RATE,
            crashes={kind: 1 for kind in CrashKind},
            settle_seconds=180.0,
            work_dir=tmp_path,
            progress=False,
            backend=backend,
        )
    )
    write_report(report, tmp_path / "chaos.json")
    write_page(report.to_json(), tmp_path / "chaos.json")

    assert report.findings.broken == [], report.render()
    assert report.settings["state_store"] == backend
    assert sum(report.final_states.values()) == ORDERS - len(report.findings.rejected)
    faults = report.faults_by_kind()
    for kind in FaultKind:
        assert faults.get(kind.value, 0) > 0, f"no {kind.value} fault injected: {faults}"
    for fate in ("lost", "duplicated", "late", "reordered"):
        assert faults.get(f"agent-response-{fate}", 0) > 0, f"no {fate} agent response"
    assert sorted(crash.kind for crash in report.crashes) == sorted(k.value for k in CrashKind)
    assert all(crash.restarted_at is not None for crash in report.crashes)
    assert report.claims_abandoned, "the starter that died claimed nothing"
    assert report.recovery()["p95"] is not None
    assert {"Processed", "Compensated", "Error", "CompensationFailed"} <= set(report.final_states)
    # C2, U4: a compensation that stalled was found by the supervisor and resumed (the
    # records' CompensationFailures below MAX_FAILURES, or one less than it when given up).
    supervisor = report.findings.evidence.supervisor
    assert supervisor["compensations_resumed"] > 0, supervisor
    # Compensations failed and stalled at the services, not only actions.
    by_operation = report.faults_injected()
    assert by_operation["permanent"]["undo"] > 0, by_operation
    assert by_operation["hang"]["undo"] > 0, by_operation
    assert by_operation["permanent"]["do"] > 0, by_operation
    # E2, E6: answers that came after their deadline, held by the relay (its first late
    # answer is held past the deadline, the others for a draw) and slow at a service.
    past = report.answers_past_deadline()
    assert sum(past["agent-response-late"].values()) > 0, past
    assert sum(past["latency"].values()) > 0, past
    # The cost of 1,000 orders: what the histories the hosts left show is counted and priced,
    # what died with the hosts is said to be unmeasured (tools.cost).
    priced = {line["meter"]: line for line in report.to_json()["cost"]["orders"]["lines"]}
    prices = load_prices()["per_order"]
    for meter in ("dts_actions", "function_executions"):
        assert priced[prices[meter]["meter"]]["quantity"] > 0, priced
    for meter in ("cosmos_request_units", "servicebus_operations"):
        assert priced[prices[meter]["meter"]]["basis"].startswith("not measured"), priced
    assert "Azure cost of 1,000 orders (" in report.render()
    assert "Cost at rest per month of the defaults (" in report.render()
    timeline = report.to_json()["timeline"]
    assert timeline["series"][-1]["finished"] == sum(report.final_states.values())
    assert {event["kind"] for event in timeline["events"]} >= {k.value for k in CrashKind}
    # Every fault the services injected is on the time axis, inside the run (they are read
    # from the services just after the run's duration is taken, hence the slack), and the
    # per-second counts add up to the counts of the faults table.
    timed: dict[str, int] = {}
    for event in timeline["events"]:
        if str(event["kind"]).startswith("service-"):
            assert 0 <= event["t"] <= report.duration_seconds + 10, event
            kind = event["kind"].removeprefix("service-")
            timed[kind] = timed.get(kind, 0) + event["count"]
    for kind in FaultKind:
        assert timed.get(kind.value, 0) == faults[kind.value], (kind, timed, faults)
