"""The demo report's invariants, read from real service ledgers and state records (C1, C2,
E7, U4): a broken invariant is found and fails the run, a kept one is not invented."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from domain.records import CompletedStep, ProcessState, StateRecord
from domain.transitions import new_record
from tools.demo.evidence import COMPENSATION_STATES, Evidence, ServiceLedger, gather
from tools.demo.report import DemoReport
from tools.simulators.services import PAYMENT, SHIPPING, STOCK, ServiceDeclaration
from tools.simulators.services.ledger import Ledger

T0 = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
STEPS = ("reserve-stock", "charge-payment", "ship-order")
ITEMS = {"items": [{"sku": "sku-1", "quantity": 1}]}
MONEY = {"amount": "10.00", "currency": "EUR"}


class Clock:
    """The time the ledgers stamp on what they perform; a test moves it on."""

    def __init__(self) -> None:
        self.now = T0

    def at(self, seconds: float) -> None:
        self.now = T0 + dt.timedelta(seconds=seconds)

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def ledgers(clock: Clock) -> dict[str, Ledger]:
    services: tuple[ServiceDeclaration, ...] = (STOCK, PAYMENT, SHIPPING)
    return {service.name: Ledger(service, now=clock) for service in services}


def record(
    order_id: str, state: ProcessState, *, began: float | None = None, **fields: Any
) -> StateRecord:
    """A record in `state`; one in a compensation state began compensating `began` seconds
    after T0 (its CompensationStartedAt), as the write that moved it there set it; one in
    Error may have (a give-up's compensation ended in Error)."""
    if state is not ProcessState.ERROR:
        assert (state in COMPENSATION_STATES) == (began is not None), "began iff compensating"
    fresh = new_record(order_id, "replies", T0, STEPS)
    return dataclasses.replace(
        fresh,
        process_state=state,
        updated_at=T0 + dt.timedelta(seconds=60),
        compensation_started_at=None if began is None else T0 + dt.timedelta(seconds=began),
        **fields,
    )


def evidence(
    records: dict[str, StateRecord], books: dict[str, Ledger], max_failures: int = 3
) -> Evidence:
    return gather(
        records,
        [ServiceLedger(name, book.entries()) for name, book in books.items()],
        max_failures=max_failures,
        steps=STEPS,
    )


def test_a_compensated_order_with_everything_undone_keeps_every_invariant(clock: Clock) -> None:
    books = ledgers(clock)
    clock.at(1)
    reservation = books["stock"].perform("o-1", 1, ITEMS, "o-1/reserve-stock")
    clock.at(2)
    books["payment"].compensate_by_key("o-1", 1, "o-1/charge-payment")  # declined: tombstone
    clock.at(3)
    assert reservation.resource is not None
    books["stock"].compensate(reservation.resource.resource_id, 1)

    found = evidence({"o-1": record("o-1", ProcessState.COMPENSATED, began=1.5)}, books)

    assert found.steps_after_compensation == []
    assert found.net_effect_orders == []
    assert found.net_effects["stock"] == {"reserved": 1, "released": 1, "net": 0}
    assert found.net_effects["payment"] == {"charged": 0, "refunded": 0, "net": 0}
    assert found.compensations == {"started": 1, "completed": 1, "failed": 0}
    assert found.compensation_began == {"o-1": (T0 + dt.timedelta(seconds=1.5)).isoformat()}


def test_an_action_after_compensation_began_is_a_step_after_compensation_c1_e7(
    clock: Clock,
) -> None:
    books = ledgers(clock)
    clock.at(1)
    books["stock"].perform("o-1", 1, ITEMS, "o-1/reserve-stock")
    clock.at(2)
    books["payment"].compensate_by_key("o-1", 2, "o-1/charge-payment")
    clock.at(3)
    books["shipping"].perform("o-1", 2, ITEMS, "o-1/ship-order")

    found = evidence({"o-1": record("o-1", ProcessState.COMPENSATION_FAILED, began=1.5)}, books)

    assert len(found.steps_after_compensation) == 1
    assert "o-1: shipping performed shipment" in found.steps_after_compensation[0]


def test_an_action_at_the_moment_compensation_began_is_a_step_after_it_c1_e7(
    clock: Clock,
) -> None:
    books = ledgers(clock)
    clock.at(1)
    books["stock"].perform("o-1", 1, ITEMS, "o-1/reserve-stock")
    clock.at(2)
    books["payment"].perform("o-1", 1, MONEY, "o-1/charge-payment")

    found = evidence({"o-1": record("o-1", ProcessState.COMPENSATING, began=2.0)}, books)

    assert len(found.steps_after_compensation) == 1
    assert "payment performed payment" in found.steps_after_compensation[0]


def test_actions_before_compensation_began_or_without_one_are_not_steps_after_it(
    clock: Clock,
) -> None:
    books = ledgers(clock)
    clock.at(1)
    books["stock"].perform("o-1", 1, ITEMS, "o-1/reserve-stock")
    books["stock"].perform("o-done", 1, ITEMS, "o-done/reserve-stock")
    clock.at(30)
    books["payment"].perform("o-done", 2, MONEY, "o-done/charge-payment")
    records = {
        "o-1": record("o-1", ProcessState.COMPENSATION_FAILED, began=2.0),
        "o-done": record("o-done", ProcessState.PROCESSED),
    }

    found = evidence(records, books)

    assert found.steps_after_compensation == []
    assert found.compensation_began == {"o-1": (T0 + dt.timedelta(seconds=2)).isoformat()}


def test_a_compensated_order_that_left_a_side_effect_breaks_net_zero_c1(clock: Clock) -> None:
    books = ledgers(clock)
    clock.at(1)
    books["stock"].perform("o-left", 1, ITEMS, "o-left/reserve-stock")
    books["stock"].perform("o-operator", 1, ITEMS, "o-operator/reserve-stock")
    books["stock"].perform("o-done", 1, ITEMS, "o-done/reserve-stock")
    records = {
        "o-left": record("o-left", ProcessState.COMPENSATED, began=2.0),
        # Left for an operator, as CompensationFailed says: not a broken invariant.
        "o-operator": record("o-operator", ProcessState.COMPENSATION_FAILED, began=2.0),
        "o-done": record("o-done", ProcessState.PROCESSED),
    }

    found = evidence(records, books)

    assert found.net_effects["stock"] == {"reserved": 1, "released": 0, "net": 1}
    assert found.net_effect_orders == ["o-left: {'stock': 1}"]
    assert found.compensations == {"started": 2, "completed": 1, "failed": 1}


def test_an_order_its_give_up_compensated_into_error_that_left_a_side_effect_breaks_net_zero_u4(
    clock: Clock,
) -> None:
    """A give-up's compensation ends in Error only once its step in doubt is undone: the
    reservation released, or the key closed with nothing done. One left behind is named."""
    books = ledgers(clock)
    clock.at(1)
    undone = books["stock"].perform("o-undone", 1, ITEMS, "o-undone/reserve-stock")
    books["stock"].perform("o-left", 1, ITEMS, "o-left/reserve-stock")
    clock.at(3)
    assert undone.resource is not None
    books["stock"].compensate_by_key("o-undone", 4, "o-undone/reserve-stock")
    books["stock"].compensate_by_key("o-never", 4, "o-never/reserve-stock")
    given_up = {"compensation_ends_in": ProcessState.ERROR}
    records = {
        "o-undone": record("o-undone", ProcessState.ERROR, began=2.0, **given_up),
        "o-left": record("o-left", ProcessState.ERROR, began=2.0, **given_up),
        "o-never": record("o-never", ProcessState.ERROR, began=2.0, **given_up),
    }

    found = evidence(records, books)

    assert found.net_effect_orders == ["o-left: {'stock': 1}"]
    assert found.net_effects["stock"] == {"reserved": 2, "released": 1, "net": 1}
    assert found.steps_after_compensation == []


def test_an_order_in_error_by_a_declined_first_step_that_left_a_side_effect_breaks_net_zero_e8(
    clock: Clock,
) -> None:
    """A declined first step ends the order in Error at once, with no undo: that is right only
    while the service performs nothing for the declined request, however often it is
    delivered again. A reservation made for such an order is named, one declined for good
    is not."""
    books = ledgers(clock)
    clock.at(1)
    books["stock"].perform("o-left", 1, ITEMS, "o-left/reserve-stock")
    books["stock"].perform("o-declined", 1, ITEMS, "o-declined/reserve-stock", decline=True)
    books["stock"].perform("o-declined", 1, ITEMS, "o-declined/reserve-stock")
    records = {
        "o-left": record("o-left", ProcessState.ERROR),
        "o-declined": record("o-declined", ProcessState.ERROR),
    }

    found = evidence(records, books)

    assert found.net_effect_orders == ["o-left: {'stock': 1}"]
    assert found.net_effects["stock"] == {"reserved": 1, "released": 0, "net": 1}


def test_supervisor_work_is_read_from_the_records_u4_c2(clock: Clock) -> None:
    records = {
        "retried": record("retried", ProcessState.PROCESSED, failure_count=1),
        "given-up": record("given-up", ProcessState.ERROR, failure_count=3),
        "resumed": record("resumed", ProcessState.COMPENSATED, began=2.0, compensation_failures=1),
        "stalled": record(
            "stalled", ProcessState.COMPENSATION_FAILED, began=2.0, compensation_failures=3
        ),
    }

    found = evidence(records, ledgers(clock), max_failures=3)

    assert found.supervisor == {
        "retries": 3,
        "gave_up": 1,
        "compensations_resumed": 3,
        "compensations_stalled": 1,
    }


def test_step_latency_runs_from_the_step_before_it(clock: Clock) -> None:
    log = (
        CompletedStep("reserve-stock", "res-1", T0 + dt.timedelta(seconds=1)),
        CompletedStep("charge-payment", "pay-1", T0 + dt.timedelta(seconds=3)),
    )
    records = {"o-1": record("o-1", ProcessState.COMPENSATED, began=4.0, compensation_log=log)}

    found = evidence(records, ledgers(clock))

    assert found.step_latency_ms == {
        "reserve-stock": {"p50": 1000.0, "p95": 1000.0},
        "charge-payment": {"p50": 2000.0, "p95": 2000.0},
        "ship-order": {"p50": None, "p95": None},
    }


def test_start_latency_runs_from_acceptance_to_the_first_request_a_service_served(
    clock: Clock,
) -> None:
    books = ledgers(clock)
    clock.at(0.5)
    books["stock"].perform("o-1", 1, ITEMS, "o-1/reserve-stock")
    clock.at(2)
    books["payment"].perform("o-1", 1, MONEY, "o-1/charge-payment")
    clock.at(1.5)
    books["stock"].perform("o-2", 1, ITEMS, "o-2/reserve-stock")
    records = {
        "o-1": record("o-1", ProcessState.PROCESSED),
        "o-2": record("o-2", ProcessState.PROCESSED),
        "o-3": record("o-3", ProcessState.PENDING),
    }

    found = evidence(records, books)

    assert found.start_latency_ms == {"p50": 500.0, "p95": 1500.0}


def kept_report() -> DemoReport:
    return DemoReport(
        orders=1,
        final_states={"Compensated": 1},
        lost=[],
        stuck=[],
        dead_lettered=0,
        dead_letter_reasons={},
        status_messages={"received": 1, "compensated": 1},
        double_side_effects={"stock": 0, "payment": 0, "shipping": 0},
        stale_writes_refused={},
        latency_ms={"p50": 1.0, "p95": 1.0},
        per_order={"store_reads": 1.0, "store_writes": 1.0, "messages": 1.0},
        supervisor={"retries": 0},
        submitted={"order": 1},
        duration_seconds=1.0,
        net_effects={"stock": {"reserved": 1, "released": 1, "net": 0}},
    )


@pytest.mark.parametrize(
    ("change", "broken"),
    [
        ({"lost": ["o-1"]}, "1 orders lost"),
        ({"stuck": ["o-1"]}, "1 orders stuck"),
        ({"double_side_effects": {"payment": 1}}, "1 double side effects"),
        (
            {"net_effect_orders": ["o-1: {'stock': 1}"]},
            "1 compensated or failed orders left side effects",
        ),
        ({"steps_after_compensation": ["o-1: ..."]}, "1 steps after compensation"),
    ],
)
def test_any_broken_invariant_fails_the_run(change: dict[str, Any], broken: str) -> None:
    assert not kept_report().failed
    assert kept_report().to_json()["result"] == "passed"

    report = dataclasses.replace(kept_report(), **change)

    assert report.failed
    assert report.to_json()["broken_invariants"] == [broken]
    assert report.to_json()["result"] == "failed"
    assert f"broken: {broken}" in report.render()
