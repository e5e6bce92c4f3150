"""The state record's outbox over real stores (C6, R2, E8, U2, U4, C1, C2): what a committed
transition owes is stored by the write that commits it, found by the relay's bounded scan
once its grace has passed, cleared once delivered, and a fault-free order still costs at most
seven state-store writes. Runs on SQLite and on the Cosmos DB API server."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from config import Settings
from domain import transitions
from domain.policies import compensation_deadline, step_deadline
from domain.ports import (
    InvalidContinuation,
    OperationKind,
    OrderStore,
    StateStore,
    StoreMetrics,
    StoreUnavailable,
)
from domain.records import InstanceId, Owed, OwedKind, OwedMessage, ProcessState, StateRecord
from domain.workflow import Step
from services import outbox, steps
from services.operator import cancel_order
from services.outbox import delivery, owed_scan
from services.starter import claim_pending
from services.steps import Written
from services.supervisor import RecoveryKind, SweepReport, catch_up, sweep
from tests.integration.stores.store_backends import StoreFactory
from tests.support.failing_stores import FailsFromPage

T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
STEPS = ("reserve-stock", "charge-payment", "ship-order")
SETTINGS = Settings(
    reply_queues=frozenset({"replies-a"}),
    step_timeout_seconds=30,
    claim_timeout_seconds=60,
    max_failures=1,
    retry_budget=6,
    store_page_size=1,
)
TIMEOUTS = SETTINGS.timeouts
GRACE = SETTINGS.outbox_grace_seconds


def sweep_at(states: StateStore, now: datetime) -> SweepReport:
    return sweep(states, now, policy=SETTINGS.supervisor_policy, timeouts=TIMEOUTS)


def relayed(states: StateStore, now: datetime) -> list[str]:
    """The orders the relay's scan at `now` finds still owing something (U2)."""
    found = owed_scan(states, now, grace_seconds=GRACE, bounds=SETTINGS.supervisor_policy.scan)
    return sorted(record.order_id for record in found.records)


def state_of(states: StateStore, order_id: str) -> StateRecord:
    record = states.get(order_id)
    assert record is not None
    return record


def message_ids(record: StateRecord) -> list[str]:
    """What the record's outbox stands for, by stable id, in the order it goes out."""
    owed = delivery(record)
    ids = [alert.message_id for alert in owed.alerts]
    ids += [status.message_id for status in owed.statuses]
    if owed.compensation is not None:
        ids.append(f"start {owed.compensation.instance}")
    return ids


def claimed(states: StateStore, order_id: str, now: datetime = T0) -> InstanceId:
    states.create(transitions.new_record(order_id, "replies-a", now, STEPS))
    run = claim_pending(
        states,
        now,
        bounds=SETTINGS.starter_scan,
        timeouts=TIMEOUTS,
        max_running=SETTINGS.max_running_orders,
        max_backlog=SETTINGS.max_backlog_orders,
    )
    (claim,) = [c for c in run.claims if c.instance_id.order_id == order_id]
    return claim.instance_id


def begin(states: StateStore, instance: InstanceId, index: int, now: datetime = T0) -> Written:
    done = None if index == 0 else Step(index - 1, STEPS[index - 1], f"ref-{index - 1}")
    return steps.begin_step(
        states,
        instance,
        Step(index, STEPS[index]),
        done=done,
        now=now,
        complete_by=step_deadline(now, TIMEOUTS),
    )


def expired(states: StateStore, order_id: str, completed_steps: int) -> None:
    """`order_id` claimed, `completed_steps` of its steps completed and the next one begun,
    its deadline passing at T0 + 30 s."""
    instance = claimed(states, order_id)
    for index in range(completed_steps + 1):
        assert begin(states, instance, index).applied


def never_begun(states: StateStore, order_id: str) -> None:
    """`order_id` claimed with no step begun, its claim passing at T0 + 30 s: a give-up
    leaves no step in doubt, so it ends in Error at once (U4)."""
    claimed(states, order_id, now=T0 - timedelta(seconds=TIMEOUTS.claim_seconds - 30))


# --- what a recovery owes is committed with it (C6, U4, C1, C2) --------------------------


def test_a_store_error_later_in_the_scan_leaves_what_earlier_recoveries_owe_to_the_relay_c6_u4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The sweep gives one order up and asks compensation for another, then the store fails
    on its next page: the sweep never returns, yet what both recoveries owe is in their
    records, which the relay's scan finds once the grace has passed, each until cleared."""
    states, _ = stores
    never_begun(states, "o-given-up")
    expired(states, "o-compensating", completed_steps=1)
    expired(states, "o-not-reached", completed_steps=0)
    now = T0 + timedelta(seconds=31)

    with pytest.raises(StoreUnavailable):
        sweep(
            FailsFromPage(states, page=3),  # type: ignore[arg-type]
            now,
            policy=SETTINGS.supervisor_policy,
            timeouts=TIMEOUTS,
        )

    assert message_ids(state_of(states, "o-given-up")) == [
        "order-error:o-given-up:1",
        "o-given-up:failed:1",
    ]
    compensating = state_of(states, "o-compensating")
    assert compensating.process_state is ProcessState.COMPENSATING
    # The progress its dead attempt owed goes too: a recovery keeps what the record owed.
    assert message_ids(compensating) == [
        "o-compensating:in-progress:reserve-stock",
        "start o-compensating:2",
    ]
    start = delivery(compensating).compensation
    assert start is not None
    assert [(u.name, u.reference) for u in start.undo] == [
        ("charge-payment", None),
        ("reserve-stock", "ref-0"),
    ]
    assert state_of(states, "o-not-reached").owed is None
    # Due from the earliest message: the progress its attempt owed until its deadline.
    deadline = step_deadline(T0, TIMEOUTS)
    assert relayed(states, deadline + timedelta(seconds=GRACE, microseconds=-1)) == []
    later = now + timedelta(seconds=GRACE)
    assert relayed(states, later) == ["o-compensating", "o-given-up"]

    for order_id in ("o-compensating", "o-given-up"):
        assert outbox.cleared(states, state_of(states, order_id))
    assert relayed(states, later) == []


def test_each_recovery_owes_its_messages_under_their_stable_ids_c6_u2_u4_c2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """Give-up (failed + order-error), stalled compensation (compensation-failed + its
    alert), and the catch-up's order-overdue alert next to the recovery it requested."""
    states, _ = stores
    expired(states, "o-1", completed_steps=1)
    now = T0 + timedelta(seconds=31)
    requested = sweep_at(states, now).recoveries[0]
    assert requested.kind is RecoveryKind.COMPENSATION_REQUESTED
    assert message_ids(requested.record) == ["o-1:in-progress:reserve-stock", "start o-1:2"]
    assert requested.compensation_instance == InstanceId("o-1", 2)
    assert outbox.cleared(states, requested.record)

    stalled_at = now + timedelta(seconds=TIMEOUTS.compensation_seconds + 1)
    stalled = sweep_at(states, stalled_at).recoveries[0]
    assert stalled.kind is RecoveryKind.COMPENSATION_STALLED
    assert message_ids(state_of(states, "o-1")) == [
        "compensation-failed:o-1:2",
        "o-1:compensation-failed:2",
    ]
    assert stalled.status is not None
    assert stalled.alert is not None
    assert "left to undo: charge-payment" in stalled.alert.body["reason"]

    never_begun(states, "o-late")
    late = T0 + timedelta(seconds=30 + SETTINGS.supervisor_window_seconds + 1)
    found = catch_up(states, late, policy=SETTINGS.supervisor_policy, timeouts=TIMEOUTS)
    assert [r.kind for r in found.recoveries] == [RecoveryKind.GAVE_UP]
    assert message_ids(state_of(states, "o-late")) == [
        "order-error:o-late:1",
        "order-overdue:o-late:1",
        "o-late:failed:1",
    ]


def test_an_operators_cancel_owes_the_start_of_its_compensation_c6_c2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    expired(states, "o-1", completed_steps=1)
    request = cancel_order(states, "o-1", T0, timeouts=TIMEOUTS, reason="the customer asked")
    owed = ["o-1:in-progress:reserve-stock", "start o-1:2"]
    assert message_ids(state_of(states, "o-1")) == owed
    assert message_ids(request.record) == owed


# --- what the workflow's writes owe (C6, R2, E8, C2) -------------------------------------


def test_each_fenced_write_replaces_the_outbox_with_what_it_owes_itself_c6_r2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """A step's write owes the progress of the step before it until its own deadline; the
    write after it replaces that; the final write owes the last progress and `completed`,
    which the relay takes over after the grace unless it is cleared."""
    states, _ = stores
    instance = claimed(states, "o-1")
    assert begin(states, instance, 0).record.owed is None  # type: ignore[union-attr]
    second = begin(states, instance, 1)
    assert second.record is not None
    assert message_ids(second.record) == ["o-1:in-progress:reserve-stock"]
    assert second.record.owed is not None
    assert second.record.owed.due == step_deadline(T0, TIMEOUTS)
    assert relayed(states, T0 + timedelta(seconds=GRACE)) == []
    assert relayed(states, step_deadline(T0, TIMEOUTS) + timedelta(seconds=GRACE)) == ["o-1"]

    third = begin(states, instance, 2)
    assert third.record is not None
    assert message_ids(third.record) == ["o-1:in-progress:charge-payment"]
    done = steps.finish_steps(states, instance, Step(2, STEPS[2], "ref-2"), now=T0)
    assert done.record is not None
    assert message_ids(done.record) == ["o-1:in-progress:ship-order", "o-1:completed:1"]
    assert [s.message_id for s in done.statuses] == message_ids(done.record)
    assert relayed(states, T0 + timedelta(seconds=GRACE)) == ["o-1"]

    again = steps.finish_steps(states, instance, Step(2, STEPS[2], "ref-2"), now=T0)
    assert [s.message_id for s in again.statuses] == message_ids(done.record)
    assert outbox.cleared(states, done.record)
    assert relayed(states, T0 + timedelta(seconds=GRACE)) == []
    repeated = steps.finish_steps(states, instance, Step(2, STEPS[2], "ref-2"), now=T0)
    assert repeated.applied
    assert repeated.statuses == ()


def test_a_final_failure_owes_its_status_and_alert_and_a_compensating_one_nothing_c6_e8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    first = claimed(states, "o-first")
    begin(states, first, 0)
    failed = steps.fail_step(
        states,
        first,
        Step(0, STEPS[0]),
        reason="out of stock",
        now=T0,
        compensate_by=compensation_deadline(T0, TIMEOUTS),
    )
    assert failed.record is not None
    assert message_ids(failed.record) == ["order-error:o-first:1", "o-first:failed:1"]

    later = claimed(states, "o-later")
    begin(states, later, 0)
    begin(states, later, 1)
    compensating = steps.fail_step(
        states,
        later,
        Step(1, STEPS[1]),
        reason="card declined",
        now=T0,
        compensate_by=compensation_deadline(T0, TIMEOUTS),
    )
    assert compensating.record is not None
    assert compensating.record.owed is None
    undo = compensating.undo[0]
    assert steps.begin_undo(
        states, later, undo, undone=None, now=T0, complete_by=compensation_deadline(T0, TIMEOUTS)
    ).applied
    gave_up = steps.undo_failed(states, later, undo, reason="refund refused", now=T0)
    assert gave_up.record is not None
    assert message_ids(gave_up.record) == [
        "compensation-failed:o-later:1",
        "o-later:compensation-failed:1",
    ]
    assert gave_up.alert is not None
    assert gave_up.alert.body["reason"] == (
        "undoing charge-payment failed: refund refused; "
        "left to undo: charge-payment (by idempotency key), reserve-stock (ref-0)"
    )


# --- the relay's query, the clear and the cost (C6, U2) ----------------------------------


def owing(order_id: str, due: datetime | None) -> StateRecord:
    record = transitions.new_record(order_id, "replies-a", T0, STEPS)
    if due is None:
        return record
    message = OwedMessage(OwedKind.STATUS, "failed", 1, due, "a reason", None)
    return replace(record, process_state=ProcessState.ERROR, owed=Owed(due, (message,)))


def test_the_relay_query_pages_through_the_records_owing_since_before_a_moment_c6_u2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    until = T0
    for index in range(7):
        states.create(owing(f"o-{index}", until - timedelta(minutes=index)))
    states.create(owing("o-due-later", until + timedelta(microseconds=1)))
    states.create(owing("o-owes-nothing", None))

    found: list[str] = []
    token: str | None = None
    for _ in range(10):
        page = states.query_owed(until=until, page_size=3, continuation=token)
        assert len(page.items) <= 3
        found += [record.order_id for record in page.items]
        token = page.continuation
        if token is None:
            break
    assert sorted(found) == [f"o-{index}" for index in range(7)]
    if type(states).__name__ == "SqliteStateStore":
        assert found == [f"o-{index}" for index in reversed(range(7))]
    with pytest.raises(InvalidContinuation):
        states.query_owed(until=until, page_size=1, continuation="not-a-token")


def test_a_clear_is_refused_once_the_record_changed_and_the_outbox_stays_c6(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    created = states.create(owing("o-1", T0)).record
    newer = states.replace(replace(created, last_error="moved on"))
    assert not outbox.cleared(states, created)
    assert state_of(states, "o-1").owed == newer.owed is not None
    assert outbox.cleared(states, newer)
    assert state_of(states, "o-1").owed is None


def test_a_fault_free_three_step_order_costs_seven_state_store_writes_outbox_cleared_c6(
    store_factory: StoreFactory,
) -> None:
    """The order's create, the claim, one write per step, Processed with the statuses it
    owes, and the one write that clears them once delivered: 7 state-store writes (and the
    orders database's one)."""
    metrics = StoreMetrics()
    states, orders = store_factory.open_stores(metrics)
    instance = claimed(states, "o-1")
    for index in range(len(STEPS)):
        assert begin(states, instance, index).applied
    done = steps.finish_steps(states, instance, Step(2, STEPS[2], "ref-2"), now=T0)
    assert done.record is not None
    assert outbox.cleared(states, done.record)
    costs = metrics.snapshot()
    assert costs[OperationKind.CREATE].writes == 1
    assert costs[OperationKind.REPLACE].writes == 2  # the claim and the clear
    assert costs[OperationKind.FENCED_UPDATE].writes == 4
    assert metrics.total().writes == 7
    assert orders.get("o-1") is None  # this order's document is the orders database's write
