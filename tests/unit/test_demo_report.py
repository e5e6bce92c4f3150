"""The demo report's invariant on lost orders, with admission control's rejections (C5)."""

from __future__ import annotations

from tools.demo.client import ClientLog
from tools.demo.report import DemoReport, lost_orders


def report(lost: list[str], rejected: list[str]) -> DemoReport:
    return DemoReport(
        orders=3,
        final_states={"Processed": 1},
        lost=lost,
        stuck=[],
        dead_lettered=0,
        dead_letter_reasons={},
        status_messages={"received": 1, "completed": 1, "rejected": 1},
        double_side_effects={},
        stale_writes_refused={},
        latency_ms={"p50": None, "p95": None},
        per_order={"store_reads": 0, "store_writes": 0, "messages": 0, "request_charge": 0},
        supervisor={},
        submitted={"order": 3},
        duration_seconds=1.0,
        rejected=rejected,
    )


def test_an_order_rejected_at_the_backlog_bound_is_counted_not_lost_c5() -> None:
    records = {"o-done": object(), "o-rejected": None, "o-vanished": None}

    lost = lost_orders(records, rejected=["o-rejected"])

    assert lost == ["o-vanished"]
    shown = report(lost, ["o-rejected"])
    assert shown.to_json()["rejected"] == 1
    assert shown.to_json()["status_messages"]["rejected"] == 1
    assert shown.broken_invariants == ["1 orders lost"]
    assert report([], ["o-rejected"]).broken_invariants == []
    assert "Rejected at the backlog bound: 1" in report([], ["o-rejected"]).render()


def test_the_client_log_counts_a_rejection_as_an_answer_and_keeps_it_across_processes_c5() -> None:
    log = ClientLog(finished_at={"o-done": 2.0}, rejected=["o-rejected"])
    assert log.answered == 2
    assert ClientLog.from_document(log.to_document()).rejected == ["o-rejected"]
