"""The service layer over real stores: submission, starter, fenced steps, supervisor.

Rules: S1-S4, C6 (submission), C5 (the backlog bound at submission, the running cap at the
starter), D1-D3 (starter, racing starters in threads), D4/E5/E8/C1/C2
(fenced writes of an attempt), U1-U6 (bounded sweeps, thresholds, concurrent supervisors),
R1-R2 (status replies), and the cost target of a fault-free order.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import bootstrap
from adapters import blocking_calls
from adapters.codec import from_data
from config import Settings
from domain import transitions
from domain.contracts import AlertKind, Order
from domain.policies import compensation_deadline, step_deadline
from domain.ports import (
    OperationCost,
    OperationKind,
    OrderStore,
    Page,
    RecordNotFound,
    StateStore,
    StoreMetrics,
)
from domain.records import (
    CompletedStep,
    InstanceId,
    ProcessState,
    StateRecord,
    StepState,
    format_utc,
)
from domain.transitions import IllegalTransition
from domain.workflow import Step
from orchestrators.order_workflow import compensation_input
from orchestrators.payloads import Attempt
from services import steps
from services.admission import BacklogGate
from services.operator import cancel_order, load_order, resubmit_order
from services.paging import StopReason
from services.retention import RetirementReport, retire_finished
from services.starter import StarterRun, claim_accepted, claim_pending
from services.status import reply_queue_allowed
from services.steps import Written
from services.submission import (
    INVALID_MESSAGE_REASON,
    ORDER_CONFLICT_REASON,
    Accepted,
    DeadLetter,
    Rejected,
    submit_order,
)
from services.supervisor import Recovery, RecoveryKind, SweepReport, catch_up, sweep
from tests.integration.stores.store_backends import StoreFactory

T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
THREAD_TIMEOUT = 60.0
SETTINGS = Settings(
    reply_queues=frozenset({"replies-a"}),
    step_timeout_seconds=30,
    claim_timeout_seconds=60,
    max_failures=3,
    retry_delay_seconds=0,
    long_wait_after_failures=3,
)
TIMEOUTS = SETTINGS.timeouts
REPLIES = SETTINGS.reply_queues
STEPS = SETTINGS.order_steps
"""The workflow a submitted order runs: the default three steps."""


def order_body(order_id: str, currency: str = "EUR", **extra: Any) -> str:
    return json.dumps(
        {
            "schemaVersion": 1,
            "orderId": order_id,
            "customerId": "customer-1",
            "items": [{"sku": "sku-1", "quantity": 1}],
            "currency": currency,
            **extra,
        }
    )


def submit(
    stores: tuple[StateStore, OrderStore],
    order_id: str,
    *,
    currency: str = "EUR",
    reply_to: str | None = "replies-a",
    now: datetime = T0,
    settings: Settings = SETTINGS,
    admission: BacklogGate | None = None,
    order_steps: tuple[str, ...] = STEPS,
) -> Accepted | Rejected | DeadLetter:
    """Submit through `admission`, or through a gate of the settings' bound of its own."""
    states, orders = stores
    return submit_order(
        order_body(order_id, currency),
        reply_to=reply_to,
        message_id=order_id,
        orders=orders,
        states=states,
        admission=admission or bootstrap.backlog_gate(settings, states),
        reply_queues=settings.reply_queues,
        now=now,
        steps=order_steps,
    )


def accepted(
    stores: tuple[StateStore, OrderStore], order_id: str, order_steps: tuple[str, ...] = STEPS
) -> Accepted:
    result = submit(stores, order_id, order_steps=order_steps)
    assert isinstance(result, Accepted), result
    return result


def claims_at(states: StateStore, now: datetime, settings: Settings = SETTINGS) -> StarterRun:
    """One starter run at `now` with the starter's settings (D1-D3)."""
    return claim_pending(
        states,
        now,
        bounds=settings.starter_scan,
        timeouts=settings.timeouts,
        max_running=settings.max_running_orders,
        max_backlog=settings.max_backlog_orders,
    )


def sweep_at(states: StateStore, now: datetime, settings: Settings = SETTINGS) -> SweepReport:
    """One supervisor sweep at `now` with the supervisor's settings (U1-U6)."""
    return sweep(states, now, policy=settings.supervisor_policy, timeouts=settings.timeouts)


def claim_one(states: StateStore, now: datetime = T0) -> InstanceId:
    run = claims_at(states, now)
    assert len(run.claims) == 1, run
    return run.claims[0].instance_id


def state_of(states: StateStore, order_id: str) -> StateRecord:
    record = states.get(order_id)
    assert record is not None
    return record


def begin(
    states: StateStore,
    instance: InstanceId,
    index: int,
    *,
    now: datetime = T0,
    order_steps: tuple[str, ...] = STEPS,
) -> Written:
    """Begin step `index` of the attempt, with its CompleteBy (D6); the step before it
    completes in the same write, with a reference named after the step (C1)."""
    done = (
        None
        if index == 0
        else Step(index - 1, order_steps[index - 1], reference(index - 1, order_steps))
    )
    return steps.begin_step(
        states,
        instance,
        Step(index, order_steps[index]),
        done=done,
        now=now,
        complete_by=step_deadline(now, TIMEOUTS),
    )


def reference(index: int, order_steps: tuple[str, ...]) -> str:
    return f"{order_steps[index]}-ref"


def finish(
    states: StateStore,
    instance: InstanceId,
    *,
    now: datetime = T0,
    order_steps: tuple[str, ...] = STEPS,
) -> Written:
    """The last step completed: Processed (E5)."""
    last = len(order_steps) - 1
    done = Step(last, order_steps[last], reference(last, order_steps))
    return steps.finish_steps(states, instance, done, now=now)


def complete(
    states: StateStore,
    instance: InstanceId,
    *,
    now: datetime = T0,
    order_steps: tuple[str, ...] = STEPS,
) -> Written:
    """Every step of the attempt, in order, answered before its deadline, then Processed."""
    for index in range(len(order_steps)):
        assert begin(states, instance, index, now=now, order_steps=order_steps).applied
    return finish(states, instance, now=now, order_steps=order_steps)


def fail(
    states: StateStore, instance: InstanceId, index: int, *, reason: str, now: datetime = T0
) -> Written:
    """Step `index` failed for good (E8): Error for the first step, else compensation (C1)."""
    return steps.fail_step(
        states,
        instance,
        Step(index, STEPS[index]),
        reason=reason,
        now=now,
        compensate_by=compensation_deadline(now, TIMEOUTS),
    )


# --- submission (S1-S4, C6, R1) ------------------------------------------------------------


def test_a_valid_order_is_written_to_both_stores_and_acknowledged_s2_s4_r2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, orders = stores
    result = accepted(stores, "o-1")
    assert result.order_created
    assert result.state_created
    assert orders.get("o-1") == result.order
    record = state_of(states, "o-1")
    assert (record.process_state, record.locked_by, record.complete_by) == (
        ProcessState.PENDING,
        None,
        None,
    )
    assert (record.failure_count, record.reply_to) == (0, "replies-a")
    assert result.status is not None
    assert result.status.queue == "replies-a"
    assert result.status.message_id == "o-1:received:-"
    assert result.status.body["status"] == "received"


def test_a_redelivered_order_is_accepted_again_without_rewriting_anything_s2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    first = accepted(stores, "o-1")
    claim_one(states)
    in_progress = state_of(states, "o-1")
    again = accepted(stores, "o-1")
    assert not again.order_created
    assert not again.state_created
    assert again.status is not None
    assert first.status is not None
    assert again.status.message_id == first.status.message_id
    after = state_of(states, "o-1")
    assert after == in_progress
    assert after.etag == in_progress.etag


def test_a_conflicting_duplicate_is_dead_lettered_with_an_alert_and_never_written_s3(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, orders = stores
    original = accepted(stores, "o-1")
    record = state_of(states, "o-1")
    result = submit(stores, "o-1", currency="USD")
    assert isinstance(result, DeadLetter)
    assert result.reason == ORDER_CONFLICT_REASON
    assert "differs in currency" in result.description
    assert result.alert.body["kind"] == AlertKind.ORDER_CONFLICT.value
    assert result.alert.body["orderId"] == "o-1"
    assert orders.get("o-1") == original.order
    assert state_of(states, "o-1").etag == record.etag


@pytest.mark.parametrize(
    ("body", "reply_to", "reason"),
    [
        ("{oops", "replies-a", "not valid JSON"),
        (order_body("o-1", currency="eur"), "replies-a", "currency"),
        (order_body("o-1", coupon="x"), "replies-a", "unknown fields ['coupon']"),
        (order_body("o-1"), "replies-z", "reply_to is not an allow-listed reply queue"),
    ],
)
def test_an_invalid_message_is_dead_lettered_before_touching_the_stores_s3_r1(
    store_factory: StoreFactory, body: str, reply_to: str, reason: str
) -> None:
    metrics = StoreMetrics()
    states, orders = store_factory.open_stores(metrics)
    result = submit_order(
        body,
        reply_to=reply_to,
        message_id="msg-17",
        orders=orders,
        states=states,
        admission=bootstrap.backlog_gate(SETTINGS, states),
        reply_queues=REPLIES,
        now=T0,
        steps=STEPS,
    )
    assert isinstance(result, DeadLetter)
    assert result.reason == INVALID_MESSAGE_REASON
    assert reason in result.description
    assert result.alert.body["kind"] == AlertKind.INVALID_MESSAGE.value
    assert result.alert.message_id == "invalid-message:msg-17"
    assert metrics.total().calls == 0


def test_a_crash_between_the_two_writes_is_completed_by_redelivery_c6(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, orders = stores
    orders.create(Order.from_document(json.loads(order_body("o-1")) | {"id": "o-1"}))
    result = accepted(stores, "o-1")
    assert not result.order_created
    assert result.state_created
    assert state_of(states, "o-1").process_state is ProcessState.PENDING


def test_without_a_reply_queue_there_is_no_status_message_r1(
    stores: tuple[StateStore, OrderStore],
) -> None:
    result = submit(stores, "o-1", reply_to=None)
    assert isinstance(result, Accepted)
    assert result.status is None


# --- admission: the backlog bound (C5) -----------------------------------------------------


def counting_gate(states: StateStore, bound: int) -> BacklogGate:
    """A gate that counts the store before every admission, so the bound is the store's."""
    return BacklogGate(
        lambda at_most: states.count_backlog(at_most=at_most), bound=bound, recount_seconds=0
    )


def test_at_the_backlog_bound_a_new_order_is_rejected_and_nothing_is_written_c5(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, orders = stores
    gate = counting_gate(states, bound=3)
    for index in range(3):
        below = submit(stores, f"o-{index}", admission=gate)
        assert isinstance(below, Accepted), below
        assert below.state_created

    result = submit(stores, "o-3", admission=gate)

    assert isinstance(result, Rejected), result
    assert (result.backlog, result.bound) == (3, 3)
    assert states.get("o-3") is None
    assert orders.get("o-3") is None
    assert states.count_backlog(at_most=10) == 3
    status = result.status
    assert status is not None
    assert status.queue == "replies-a"
    assert status.message_id == "o-3:rejected:-"
    assert status.correlation_id == "o-3"
    assert status.subject == "rejected"
    assert status.body["status"] == "rejected"
    assert status.body["attempt"] is None
    assert "backlog at its bound: 3 of at most 3 orders" in status.body["reason"]
    assert "customer" not in status.body["reason"]
    # Without a reply queue the order is refused all the same, with nobody to tell.
    silent = submit(stores, "o-4", reply_to=None, admission=gate)
    assert isinstance(silent, Rejected)
    assert silent.status is None
    assert states.get("o-4") is None


def test_at_the_bound_an_accepted_order_is_never_rejected_and_bad_messages_still_dead_letter_c5(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    gate = counting_gate(states, bound=2)
    first = submit(stores, "o-0", admission=gate)
    assert isinstance(first, Accepted)
    assert isinstance(submit(stores, "o-1", admission=gate), Accepted)

    resent = submit(stores, "o-0", admission=gate)

    assert isinstance(resent, Accepted), resent
    assert not resent.state_created
    assert resent.record == first.record
    assert resent.status is not None
    assert resent.status.message_id == "o-0:received:-"
    conflicting = submit(stores, "o-1", currency="USD", admission=gate)
    assert isinstance(conflicting, DeadLetter)
    assert conflicting.reason == ORDER_CONFLICT_REASON
    malformed = submit_order(
        "{oops",
        reply_to="replies-a",
        message_id="msg-9",
        orders=stores[1],
        states=states,
        admission=gate,
        reply_queues=REPLIES,
        now=T0,
        steps=STEPS,
    )
    assert isinstance(malformed, DeadLetter)
    assert malformed.reason == INVALID_MESSAGE_REASON
    assert states.count_backlog(at_most=10) == 2


def test_an_order_whose_document_is_stored_is_never_rejected_its_resend_completes_it_c5_c6(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """A submission that wrote the order and crashed before the state record left the order
    half-accepted. Its resend at the backlog bound completes the record instead of being
    answered 'rejected', so a later edited resend is a conflict for the right reason."""
    states, orders = stores
    gate = counting_gate(states, bound=1)
    assert isinstance(submit(stores, "o-0", admission=gate), Accepted)
    orders.create(Order.from_document(json.loads(order_body("o-1"))))  # then the crash

    resent = submit(stores, "o-1", admission=gate)

    assert isinstance(resent, Accepted), resent
    assert resent.state_created
    assert states.get("o-1") is not None
    edited = submit(stores, "o-1", currency="USD", admission=gate)
    assert isinstance(edited, DeadLetter)
    assert edited.reason == ORDER_CONFLICT_REASON


def test_an_order_rejected_at_the_bound_is_accepted_once_an_order_finishes_c5(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    gate = counting_gate(states, bound=2)
    assert isinstance(submit(stores, "o-0", admission=gate), Accepted)
    assert isinstance(submit(stores, "o-1", admission=gate), Accepted)
    assert isinstance(submit(stores, "o-2", admission=gate), Rejected)

    done = claim_one_of(states, "o-0")
    assert complete(states, done).applied

    again = submit(stores, "o-2", admission=gate)
    assert isinstance(again, Accepted), again
    assert again.state_created
    assert state_of(states, "o-2").process_state is ProcessState.PENDING
    assert isinstance(submit(stores, "o-3", admission=gate), Rejected)


def claim_one_of(states: StateStore, order_id: str) -> InstanceId:
    """Claim `order_id` among the claimable records, leaving the others Pending."""
    record = state_of(states, order_id)
    stored = states.replace(
        transitions.claim(record, now=T0, claim_deadline=T0 + timedelta(seconds=60))
    )
    return InstanceId(stored.order_id, stored.attempt)


# --- starter (D1-D3) -----------------------------------------------------------------------


def test_the_starter_claims_each_pending_order_once_with_attempt_ids_d1_d2_d3(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    for index in range(5):
        accepted(stores, f"o-{index}")
    run = claims_at(states, T0)
    assert sorted(str(claim.instance_id) for claim in run.claims) == [
        f"o-{index}:1" for index in range(5)
    ]
    for claim in run.claims:
        record = state_of(states, claim.instance_id.order_id)
        assert record.process_state is ProcessState.PROCESSING
        assert record.locked_by == str(claim.instance_id)
        assert record.complete_by == T0 + timedelta(seconds=60)
    assert claims_at(states, T0).claims == ()


def test_a_submission_claims_its_record_by_the_created_etag_within_the_running_cap_d3_c5(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The submission's claim costs one write and no read (the create's etag), stops at the
    running cap, and loses to a starter that claimed the record first."""
    states, _ = stores
    metrics: StoreMetrics = states.metrics  # type: ignore[attr-defined]
    capped = Settings(max_running_orders=1, backlog_recount_seconds=3600)
    running = bootstrap.running_gate(capped, states)
    first = accepted(stores, "o-first")
    before = metrics.snapshot()

    claim = claim_accepted(states, first.record, T0, timeouts=TIMEOUTS, running=running)

    assert claim is not None
    assert str(claim.instance_id) == "o-first:1"
    after = metrics.snapshot()
    # The gate's count of the running orders is a query; the claim itself is one write.
    point = [kind for kind in after if kind is not OperationKind.QUERY]
    reads = sum(after[k].reads - before.get(k, OperationCost()).reads for k in point)
    writes = sum(after[k].writes - before.get(k, OperationCost()).writes for k in point)
    assert (reads, writes) == (0, 1), after
    assert state_of(states, "o-first").locked_by == "o-first:1"

    second = accepted(stores, "o-second")
    assert claim_accepted(states, second.record, T0, timeouts=TIMEOUTS, running=running) is None
    assert state_of(states, "o-second").process_state is ProcessState.PENDING

    roomy = bootstrap.running_gate(SETTINGS, states)
    assert [str(c.instance_id) for c in claims_at(states, T0).claims] == ["o-second:1"]
    assert claim_accepted(states, second.record, T0, timeouts=TIMEOUTS, running=roomy) is None
    assert state_of(states, "o-second").locked_by == "o-second:1"


@pytest.mark.parametrize("order_id", [".", ".."])
def test_the_starter_isolates_a_record_it_cannot_claim_and_claims_the_rest_d1_d3(
    stores: tuple[StateStore, OrderStore], order_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A record no attempt can be started for (an id a REST path rewrites, written before
    such ids were refused) costs the starter that record only: the claims it won before it
    and the records after it are claimed, and the record is logged with why."""
    states, _ = stores
    if type(states).__name__.startswith("Cosmos"):
        pytest.skip("the Cosmos DB API cannot store such an id: no record of one exists there")
    accepted(stores, "o-before")
    states.create(transitions.new_record(order_id, None, T0 - timedelta(seconds=1), STEPS))
    accepted(stores, "o-after")

    with caplog.at_level(logging.WARNING, logger="app.starter"):
        run = claims_at(states, T0)

    assert sorted(str(claim.instance_id) for claim in run.claims) == ["o-after:1", "o-before:1"]
    assert run.refused == 1
    assert any(
        "record refused by the starter" in r.getMessage() and "order.id=" in r.getMessage()
        for r in caplog.records
    )


def test_the_starter_respects_its_claim_cap_d1(stores: tuple[StateStore, OrderStore]) -> None:
    states, _ = stores
    for index in range(7):
        accepted(stores, f"o-{index}")
    run = claims_at(states, T0, replace(SETTINGS, starter_max_claims=3))
    assert len(run.claims) == 3
    assert run.stopped is StopReason.ITEM_CAP
    assert len(claims_at(states, T0).claims) == 4


def test_the_starter_claims_only_the_room_under_the_running_cap_c5(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    for index in range(6):
        accepted(stores, f"o-{index}")
    capped = replace(SETTINGS, max_running_orders=4)
    first = claims_at(states, T0, capped)
    assert len(first.claims) == 4
    assert first.running == 0
    # At the cap: nothing more is claimed; the rest waits Pending, visible as backlog.
    full = claims_at(states, T0, capped)
    assert full.claims == ()
    assert full.running == 4
    waiting = [
        f"o-{index}"
        for index in range(6)
        if not any(claim.instance_id.order_id == f"o-{index}" for claim in first.claims)
    ]
    assert [state_of(states, order_id).process_state for order_id in waiting] == [
        ProcessState.PENDING
    ] * 2
    # A finished order frees one place, and only one.
    done = first.claims[0].instance_id
    assert complete(states, done).applied
    freed = claims_at(states, T0, capped)
    assert [claim.instance_id.order_id for claim in freed.claims] == waiting[:1]
    assert freed.running == 3


def test_racing_starters_never_claim_the_same_attempt_d3(store_factory: StoreFactory) -> None:
    stores = store_factory.open_stores()
    for index in range(120):
        accepted(stores, f"o-{index:03}")
    settings = replace(SETTINGS, store_page_size=10, starter_max_claims=25)
    starters = [store_factory.open_stores()[0] for _ in range(4)]
    barrier = threading.Barrier(len(starters), timeout=THREAD_TIMEOUT)

    def run_starter(states: StateStore) -> tuple[list[str], int]:
        barrier.wait()
        won: list[str] = []
        lost = 0
        for _ in range(50):
            run = claims_at(states, T0, settings)
            won += [str(claim.instance_id) for claim in run.claims]
            lost += run.lost_races
            if run.items_read == 0:
                break
        return won, lost

    with ThreadPoolExecutor(len(starters)) as pool:
        results = list(pool.map(run_starter, starters, timeout=THREAD_TIMEOUT))
    claims = [claim for won, _ in results for claim in won]
    assert len(claims) == len(set(claims)) == 120
    assert sorted(claims) == [f"o-{index:03}:1" for index in range(120)]


# --- fenced writes of an attempt (D4, E5, E6, E8, C1, C2) ----------------------------------


def test_a_fault_free_order_completes_and_reports_completed_e5_r2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    accepted(stores, "o-1")
    instance = claim_one(states)
    step = begin(states, instance, 0)
    assert step.applied
    assert step.record is not None
    assert step.record.complete_by == T0 + timedelta(seconds=30)
    for index in range(1, len(STEPS)):
        assert begin(states, instance, index, now=T0 + timedelta(seconds=1)).applied
    done = finish(states, instance, now=T0 + timedelta(seconds=1))
    assert done.applied
    assert state_of(states, "o-1").process_state is ProcessState.PROCESSED
    assert [status.message_id for status in done.statuses] == [
        f"o-1:in-progress:{STEPS[-1]}",
        "o-1:completed:1",
    ]


def test_a_stale_attempt_cannot_touch_the_record_of_its_successor_d4_e5(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    accepted(stores, "o-1")
    first = claim_one(states)
    begin(states, first, 0)
    later = T0 + timedelta(seconds=31)
    report = sweep_at(states, later)
    assert report.count(RecoveryKind.RETRY) == 1
    second = claim_one(states, later)
    assert second == InstanceId("o-1", 2)
    stale_writes: list[Callable[[], Written]] = [
        lambda: begin(states, first, 0, now=later),
        lambda: begin(states, first, 1, now=later),
        lambda: finish(states, first, now=later),
        lambda: fail(states, first, 0, reason="late", now=later),
        lambda: fail(states, first, 1, reason="late", now=later),
    ]
    for stale_write in stale_writes:
        outcome = stale_write()
        assert not outcome.applied
        assert outcome.statuses == ()
        assert outcome.alert is None
        assert outcome.undo == ()
    record = state_of(states, "o-1")
    assert (record.process_state, record.locked_by) == (ProcessState.PROCESSING, "o-1:2")
    assert complete(states, second, now=later).applied


def test_a_repeated_completion_of_the_same_attempt_resends_its_status_c8_r2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The activity ran, its write applied, sending the status failed; the retry must send it."""
    states, _ = stores
    accepted(stores, "o-1")
    instance = claim_one(states)
    first = complete(states, instance)
    again = finish(states, instance, now=T0 + timedelta(seconds=1))
    assert first.applied
    assert again.applied
    assert first.statuses[-1].message_id == "o-1:completed:1"
    assert [s.message_id for s in again.statuses] == [s.message_id for s in first.statuses]
    for index in (0, len(STEPS) - 1):
        failed = fail(states, instance, index, reason="late")
        assert not failed.applied
    assert state_of(states, "o-1").process_state is ProcessState.PROCESSED


def test_a_stale_attempt_gets_nothing_after_its_successor_completed_d4_c8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    accepted(stores, "o-1")
    first = claim_one(states)
    later = T0 + timedelta(seconds=61)
    sweep_at(states, later)
    second = claim_one(states, later)
    assert complete(states, second, now=later).applied
    stale = finish(states, first, now=later)
    assert (stale.applied, stale.statuses) == (False, ())


def test_a_late_completion_after_the_supervisor_took_over_is_refused_e5_e6(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    accepted(stores, "o-1")
    instance = claim_one(states)
    sweep_at(states, T0 + timedelta(seconds=61))
    outcome = finish(states, instance, now=T0 + timedelta(seconds=62))
    assert not outcome.applied
    record = state_of(states, "o-1")
    assert (record.process_state, record.failure_count) == (ProcessState.PENDING, 1)


def test_a_permanent_error_ends_in_error_with_an_alert_and_a_failed_status_e8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    accepted(stores, "o-1")
    instance = claim_one(states)
    begin(states, instance, 0)
    outcome = fail(states, instance, 0, reason="card declined")
    assert outcome.applied
    assert state_of(states, "o-1").process_state is ProcessState.ERROR
    assert outcome.alert is not None
    [status] = outcome.statuses
    assert outcome.alert.body["kind"] == "order-error"
    assert outcome.alert.body["reason"] == "card declined"
    assert status.message_id == "o-1:failed:1"
    assert status.body["reason"] == "card declined"


def test_a_failure_after_completed_steps_compensates_and_reports_it_c1_c2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    for order_id in ("o-ok", "o-bad"):
        accepted(stores, order_id)
    for instance in claims_at(states, T0).claims:
        iid = instance.instance_id
        reserved = Step(0, STEPS[0], f"{iid.order_id}:reserve")
        begin(states, iid, 0)
        steps.begin_step(
            states,
            iid,
            Step(1, STEPS[1]),
            done=reserved,
            now=T0,
            complete_by=step_deadline(T0, TIMEOUTS),
        )
        failing = fail(states, iid, 1, reason="charge refused")
        assert failing.applied
        assert failing.statuses == ()
        assert failing.undo == (Step(1, STEPS[1]), reserved)
        compensating = state_of(states, iid.order_id)
        assert compensating.process_state is ProcessState.COMPENSATING
        assert compensating.compensation_log == (CompletedStep(STEPS[0], reserved.reference, T0),)
        undone = None
        for undo in failing.undo:
            started = steps.begin_undo(
                states,
                iid,
                undo,
                undone=undone,
                now=T0,
                complete_by=compensation_deadline(T0, TIMEOUTS),
            )
            assert started.applied
            undone = undo
        assert undone == reserved
        if iid.order_id == "o-ok":
            finished = steps.finish_undo(states, iid, undone=undone, now=T0)
        else:
            finished = steps.undo_failed(states, iid, undone, reason="release refused", now=T0)
        assert finished.applied
        [status] = finished.statuses
        if iid.order_id == "o-ok":
            assert status.message_id == "o-ok:compensated:1"
            assert finished.alert is None
        else:
            assert status.message_id == "o-bad:compensation-failed:1"
            assert finished.alert is not None
            assert finished.alert.body["kind"] == "compensation-failed"
    assert state_of(states, "o-ok").process_state is ProcessState.COMPENSATED
    assert state_of(states, "o-bad").process_state is ProcessState.COMPENSATION_FAILED


def test_a_write_returns_the_status_for_the_records_own_reply_queue_r1(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """R1 holds at the sending edge: a status goes only to the record's own reply queue, and
    only while that queue is on REPLY_QUEUES (activities/replies.py asks
    `reply_queue_allowed` at the moment of sending). The write itself returns the status for
    the record's queue, whatever the allow-list says now; against an allow-list the queue was
    removed from, the sender's check refuses every one of them."""
    states, _ = stores
    accepted(stores, "o-1")
    instance = claim_one(states)
    outcome = complete(states, instance)
    assert outcome.applied
    assert [status.queue for status in outcome.statuses] == ["replies-a", "replies-a"]
    assert all(reply_queue_allowed(status.queue, REPLIES) for status in outcome.statuses)
    assert not any(reply_queue_allowed(status.queue, frozenset()) for status in outcome.statuses)


# --- supervisor (U1-U6) --------------------------------------------------------------------


def expired_orders(stores: tuple[StateStore, OrderStore], count: int) -> datetime:
    """Submit and claim `count` orders and return a time when every claim has expired."""
    states, _ = stores
    for index in range(count):
        accepted(stores, f"o-{index:03}")
    claimed = 0
    while claimed < count:
        claimed += len(claims_at(states, T0).claims)
    return T0 + timedelta(seconds=SETTINGS.claim_timeout_seconds + 1)


def test_a_sweep_is_bounded_by_its_item_cap_and_the_next_one_continues_u2_u6(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    later = expired_orders(stores, 30)
    settings = replace(SETTINGS, store_page_size=4, supervisor_max_items=10)
    first = sweep_at(states, later, settings)
    assert (first.items_read, first.pages, first.stopped) == (10, 3, StopReason.ITEM_CAP)
    assert len(first.recoveries) == first.writes == 10
    totals = [len(first.recoveries)]
    for _ in range(5):
        report = sweep_at(states, later, settings)
        totals.append(len(report.recoveries))
        if report.stopped is StopReason.EXHAUSTED:
            break
    assert totals == [10, 10, 10]
    assert report.stopped is StopReason.EXHAUSTED
    assert all(
        r.process_state is ProcessState.PENDING and r.failure_count == 1
        for r in (state_of(states, f"o-{index:03}") for index in range(30))
    )


def test_a_sweep_is_bounded_by_its_page_cap_u2(stores: tuple[StateStore, OrderStore]) -> None:
    states, _ = stores
    later = expired_orders(stores, 10)
    settings = replace(SETTINGS, store_page_size=3, supervisor_max_pages=2)
    report = sweep_at(states, later, settings)
    assert (report.items_read, report.pages, report.stopped) == (6, 2, StopReason.PAGE_CAP)


def test_a_sweep_stops_when_the_store_repeats_a_continuation_token_u2(
    stores: tuple[StateStore, OrderStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    states, _ = stores
    later = expired_orders(stores, 3)
    real_query = states.query_expired

    def looping_query(**kwargs: Any) -> Page[StateRecord]:
        page = real_query(**{**kwargs, "continuation": None, "page_size": 1})
        return Page(page.items, "same-token-every-time")

    monkeypatch.setattr(states, "query_expired", looping_query)
    report = sweep_at(states, later)
    assert report.stopped is StopReason.REPEATED_TOKEN
    assert report.pages == 2


def test_a_sweep_ignores_records_outside_its_window_u2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    expired_orders(stores, 2)
    far_later = T0 + timedelta(seconds=SETTINGS.supervisor_window_seconds + 120)
    report = sweep_at(states, far_later)
    assert report.items_read == 0
    assert report.recoveries == ()


def catch_up_at(states: StateStore, now: datetime, settings: Settings = SETTINGS) -> SweepReport:
    """One supervisor catch-up at `now` with the supervisor's settings (U2)."""
    return catch_up(states, now, policy=settings.supervisor_policy, timeouts=settings.timeouts)


def test_the_catch_up_recovers_a_record_expired_before_the_window_and_alerts_u2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """A claim whose deadline passed two days before `now` (the supervisor was down) is out
    of every sweep's window; the catch-up finds it, retries it like a sweep would and names
    it in an `order-overdue` alert. One at its last failure is given up, with both alerts.
    An expired record inside the window and a live one are the catch-up's business not."""
    states, _ = stores
    window = timedelta(seconds=SETTINGS.supervisor_window_seconds)
    now = T0 + window + timedelta(days=2)
    for order_id in ("o-old", "o-old-last-try"):
        accepted(stores, order_id)
    assert len(claims_at(states, T0).claims) == 2
    last_try = state_of(states, "o-old-last-try")
    states.replace(replace(last_try, failure_count=SETTINGS.max_failures - 1))
    missed = sweep_at(states, now)
    assert (missed.items_read, missed.recoveries) == (0, ())
    for order_id, claimed_at in [
        ("o-recent", now - timedelta(minutes=5)),
        ("o-live", now - timedelta(seconds=10)),
    ]:
        assert isinstance(submit(stores, order_id, now=claimed_at), Accepted)
        assert len(claims_at(states, claimed_at).claims) == 1
    untouched = {order_id: state_of(states, order_id) for order_id in ("o-recent", "o-live")}

    report = catch_up_at(states, now)

    assert report.window_end < now - window
    by_order = {r.record.order_id: r for r in report.recoveries}
    assert sorted(by_order) == ["o-old", "o-old-last-try"]
    retried, gave_up = by_order["o-old"], by_order["o-old-last-try"]
    assert retried.kind is RecoveryKind.RETRY
    old = state_of(states, "o-old")
    assert (old.process_state, old.failure_count, old.locked_by) == (ProcessState.PENDING, 1, None)
    assert retried.alert is None
    [overdue] = retried.alerts
    assert overdue.body["kind"] == AlertKind.ORDER_OVERDUE.value == "order-overdue"
    assert (overdue.body["orderId"], overdue.body["attempt"]) == ("o-old", 1)
    assert overdue.message_id == "order-overdue:o-old:1"
    deadline = T0 + timedelta(seconds=SETTINGS.claim_timeout_seconds)
    assert format_utc(deadline) in overdue.body["reason"]
    assert "SUPERVISOR_WINDOW_SECONDS" in overdue.body["reason"]
    assert "requested retry" in overdue.body["reason"]
    assert gave_up.kind is RecoveryKind.GAVE_UP
    assert [alert.body["kind"] for alert in gave_up.alerts] == ["order-error", "order-overdue"]
    assert state_of(states, "o-old-last-try").process_state is ProcessState.ERROR
    assert {order_id: state_of(states, order_id) for order_id in untouched} == untouched
    assert [r.record.order_id for r in claims_at(states, now).claims] == ["o-old"]
    assert catch_up_at(states, now).recoveries == ()


def test_the_catch_up_is_bounded_and_the_next_one_continues_u2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The catch-up reads under the sweep's item and page caps; what one run leaves, the
    next one finds, until every overdue record is recovered."""
    states, _ = stores
    expired_orders(stores, 12)
    settings = replace(
        SETTINGS,
        store_page_size=2,
        supervisor_max_items=5,
        supervisor_window_seconds=86400,
        supervisor_catchup_window_seconds=3 * 86400,
    )
    now = T0 + timedelta(days=2)
    paged = catch_up_at(states, now, replace(settings, supervisor_max_pages=2))
    assert (paged.items_read, paged.pages, paged.stopped) == (4, 2, StopReason.PAGE_CAP)
    runs = [len(paged.recoveries)]
    for _ in range(5):
        report = catch_up_at(states, now, settings)
        assert report.items_read <= 5
        assert report.pages <= settings.supervisor_max_pages
        runs.append(len(report.recoveries))
        if report.stopped is StopReason.EXHAUSTED:
            break
    assert runs == [4, 5, 3]
    assert all(len(r.alerts) == 1 for r in report.recoveries)
    assert all(
        state_of(states, f"o-{index:03}").process_state is ProcessState.PENDING
        for index in range(12)
    )


def test_a_record_expired_twice_the_catch_up_window_ago_is_recovered_and_alerted_u2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """Claims whose deadline passed two catch-up windows before `now` are beyond the sweep
    and beyond the catch-up's window; the catch-up's last scan, over the state records
    themselves, finds them, recovers each by the sweep's rules (a retry, and a give-up at
    the last failure) and names each in an `order-overdue` alert naming the window it
    escaped. A record inside the catch-up window stays the window's find. The next catch-up
    finds nothing and its beyond-window scan reads one page that holds nothing."""
    states, _ = stores
    catch_up_window = timedelta(seconds=SETTINGS.supervisor_catchup_window_seconds)
    now = T0 + 2 * catch_up_window
    for order_id in ("o-ancient", "o-ancient-last-try"):
        accepted(stores, order_id)
    assert len(claims_at(states, T0).claims) == 2
    last_try = state_of(states, "o-ancient-last-try")
    states.replace(replace(last_try, failure_count=SETTINGS.max_failures - 1))
    overdue_since = now - timedelta(days=2)
    assert isinstance(submit(stores, "o-overdue", now=overdue_since), Accepted)
    assert len(claims_at(states, overdue_since).claims) == 1

    report = catch_up_at(states, now)

    assert [r.record.order_id for r in report.recoveries] == ["o-overdue"]
    beyond = report.beyond_window
    assert beyond is not None
    assert beyond.window_start is None
    assert beyond.window_end < report.window_start == now - catch_up_window
    by_order = {r.record.order_id: r for r in beyond.recoveries}
    assert sorted(by_order) == ["o-ancient", "o-ancient-last-try"]
    assert len(report.all_recoveries) == 3
    assert beyond.items_read == beyond.writes == 2
    retried, gave_up = by_order["o-ancient"], by_order["o-ancient-last-try"]
    assert retried.kind is RecoveryKind.RETRY
    ancient = state_of(states, "o-ancient")
    assert (ancient.process_state, ancient.failure_count, ancient.locked_by) == (
        ProcessState.PENDING,
        1,
        None,
    )
    [overdue] = retried.alerts
    assert overdue.body["kind"] == AlertKind.ORDER_OVERDUE.value
    assert (overdue.body["orderId"], overdue.body["attempt"]) == ("o-ancient", 1)
    assert overdue.message_id == "order-overdue:o-ancient:1"
    deadline = T0 + timedelta(seconds=SETTINGS.claim_timeout_seconds)
    assert format_utc(deadline) in overdue.body["reason"]
    assert "SUPERVISOR_CATCHUP_WINDOW_SECONDS" in overdue.body["reason"]
    assert "requested retry" in overdue.body["reason"]
    assert gave_up.kind is RecoveryKind.GAVE_UP
    assert [alert.body["kind"] for alert in gave_up.alerts] == ["order-error", "order-overdue"]
    assert state_of(states, "o-ancient-last-try").process_state is ProcessState.ERROR
    assert sorted(r.record.order_id for r in claims_at(states, now).claims) == [
        "o-ancient",
        "o-overdue",
    ]

    quiet = catch_up_at(states, now)
    assert quiet.all_recoveries == ()
    assert quiet.beyond_window is not None
    assert (quiet.beyond_window.pages, quiet.beyond_window.items_read) == (1, 0)
    assert quiet.beyond_window.stopped is StopReason.EXHAUSTED


def test_the_scan_beyond_the_catch_up_window_is_bounded_and_the_next_one_continues_u2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The beyond-window scan reads under the same item and page caps as every scan; what
    one catch-up leaves, the next finds, until every record is recovered."""
    states, _ = stores
    expired_orders(stores, 12)
    settings = replace(
        SETTINGS,
        store_page_size=2,
        supervisor_max_items=5,
        supervisor_window_seconds=86400,
        supervisor_catchup_window_seconds=3 * 86400,
    )
    now = T0 + timedelta(days=7)
    paged = catch_up_at(states, now, replace(settings, supervisor_max_pages=2)).beyond_window
    assert paged is not None
    assert (paged.items_read, paged.pages, paged.stopped) == (4, 2, StopReason.PAGE_CAP)
    runs = [len(paged.recoveries)]
    for _ in range(5):
        report = catch_up_at(states, now, settings)
        assert report.recoveries == ()
        beyond = report.beyond_window
        assert beyond is not None
        assert beyond.items_read <= 5
        assert beyond.pages <= settings.supervisor_max_pages
        runs.append(len(beyond.recoveries))
        if beyond.stopped is StopReason.EXHAUSTED:
            break
    assert runs == [4, 5, 3]
    assert all(len(r.alerts) == 1 for r in beyond.recoveries)
    assert all(
        state_of(states, f"o-{index:03}").process_state is ProcessState.PENDING
        for index in range(12)
    )


def test_below_the_threshold_an_order_is_retried_and_at_it_given_up_with_an_alert_u4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    accepted(stores, "o-1")
    now = T0
    kinds = []
    for attempt in (1, 2, 3):
        assert claim_one(states, now) == InstanceId("o-1", attempt)
        now += timedelta(seconds=61)
        report = sweep_at(states, now)
        assert len(report.recoveries) == 1
        kinds.append(report.recoveries[0].kind)
        assert report.recoveries[0].expired_instance == f"o-1:{attempt}"
    assert kinds == [RecoveryKind.RETRY, RecoveryKind.RETRY, RecoveryKind.GAVE_UP]
    record = state_of(states, "o-1")
    assert (record.process_state, record.failure_count) == (ProcessState.ERROR, 3)
    gave_up = report.recoveries[0]
    assert gave_up.alert is not None
    assert gave_up.status is not None
    assert gave_up.alert.body["kind"] == "order-error"
    assert "MAX_FAILURES=3" in gave_up.alert.body["reason"]
    assert gave_up.status.message_id == "o-1:failed:3"
    assert claims_at(states, now + timedelta(hours=1)).claims == ()


def test_past_the_long_wait_threshold_the_retry_waits_longer_u5(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    settings = replace(
        SETTINGS,
        max_failures=4,
        long_wait_after_failures=2,
        retry_delay_seconds=1,
        long_retry_delay_seconds=300,
    )
    accepted(stores, "o-1")
    claim_one(states)
    now = T0 + timedelta(seconds=61)
    assert sweep_at(states, now, settings).recoveries[0].kind is RecoveryKind.RETRY
    now += timedelta(seconds=1)
    claim_one(states, now)
    now += timedelta(seconds=61)
    report = sweep_at(states, now, settings)
    assert report.recoveries[0].kind is RecoveryKind.RETRY_AFTER_LONG_WAIT
    assert state_of(states, "o-1").complete_by == now + timedelta(seconds=300)
    assert claims_at(states, now + timedelta(seconds=299), settings).claims == ()
    assert len(claims_at(states, now + timedelta(seconds=300), settings).claims) == 1


def test_two_supervisors_at_once_never_double_count_a_failure_u6(
    store_factory: StoreFactory,
) -> None:
    stores = store_factory.open_stores()
    later = expired_orders(stores, 60)
    settings = replace(SETTINGS, store_page_size=7)
    supervisors = [store_factory.open_stores()[0] for _ in range(3)]
    barrier = threading.Barrier(len(supervisors), timeout=THREAD_TIMEOUT)

    def run_sweep(states: StateStore) -> tuple[int, int]:
        barrier.wait()
        report = sweep_at(states, later, settings)
        return len(report.recoveries), report.lost_races

    with ThreadPoolExecutor(len(supervisors)) as pool:
        results = list(pool.map(run_sweep, supervisors, timeout=THREAD_TIMEOUT))
    assert sum(recovered for recovered, _ in results) == 60
    states = stores[0]
    counts = {state_of(states, f"o-{index:03}").failure_count for index in range(60)}
    assert counts == {1}


def test_giving_up_after_completed_steps_requests_compensation_c1_u4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    settings = replace(SETTINGS, max_failures=1, compensation_timeout_seconds=90)
    names = ("reserve-stock", "charge-payment")
    states.create(transitions.new_record("o-1", "replies-a", T0, names))
    instance = claim_one(states)
    for index, done in ((0, None), (1, Step(0, names[0], "res-1"))):
        steps.begin_step(
            states,
            instance,
            Step(index, names[index]),
            done=done,
            now=T0,
            complete_by=step_deadline(T0, settings.timeouts),
        )
    now = T0 + timedelta(seconds=31)
    requested = sweep_at(states, now, settings).recoveries[0]
    assert requested.kind is RecoveryKind.COMPENSATION_REQUESTED
    assert requested.compensation_instance == InstanceId("o-1", 2)
    assert [(u.name, u.reference) for u in requested.undo] == [
        ("charge-payment", None),
        ("reserve-stock", "res-1"),
    ]
    assert (requested.status, requested.alert) == (None, None)
    record = state_of(states, "o-1")
    assert (record.process_state, record.locked_by) == (ProcessState.COMPENSATING, "o-1:2")


def test_a_stalled_compensation_is_resumed_then_given_to_an_operator_c2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    settings = replace(SETTINGS, max_failures=2, compensation_timeout_seconds=90)
    names = ("reserve-stock", "charge-payment")
    record = transitions.new_record("o-1", "replies-a", T0, names)
    record = transitions.claim(record, now=T0, claim_deadline=T0)
    record = transitions.begin_step(
        InstanceId("o-1", 1), Step(0, names[0]), complete_by=T0, now=T0
    ).apply(record)
    reserved = transitions.begin_step(
        InstanceId("o-1", 1),
        Step(1, names[1]),
        complete_by=T0,
        now=T0,
        done=Step(0, names[0], "res-1"),
    ).apply(record)
    failed = transitions.fail_step(
        InstanceId("o-1", 1), Step(1, names[1]), reason="declined", now=T0, compensate_by=T0
    ).apply(reserved)
    states.create(failed)
    resumed = sweep_at(states, T0 + timedelta(seconds=1), settings).recoveries[0]
    assert resumed.kind is RecoveryKind.COMPENSATION_RESUMED
    assert resumed.compensation_instance == InstanceId("o-1", 2)
    assert [u.name for u in resumed.undo] == ["charge-payment", "reserve-stock"]
    stalled = sweep_at(states, T0 + timedelta(seconds=92), settings).recoveries[0]
    assert stalled.kind is RecoveryKind.COMPENSATION_STALLED
    assert stalled.alert is not None
    assert stalled.status is not None
    assert stalled.alert.body["kind"] == "compensation-failed"
    assert (
        "left to undo: charge-payment (by idempotency key), reserve-stock (res-1)"
        in (stalled.alert.body["reason"])
    )
    assert stalled.status.message_id == "o-1:compensation-failed:2"
    final = state_of(states, "o-1")
    assert final.process_state is ProcessState.COMPENSATION_FAILED
    assert final.compensation_failures == 2


def test_the_supervisor_asks_for_no_work_the_retry_budget_cannot_pay_for_u4_c2_c4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """Below MAX_FAILURES, an expired attempt whose steps spent their part of the budget is
    given up, not retried, and a stalled compensation whose undos spent theirs goes to an
    operator, not resumed: each reason names the spent budget."""
    states, _ = stores
    record = transitions.new_record("o-1", "replies-a", T0, STEPS[:1])
    spent = transitions.claim(record, now=T0, claim_deadline=T0)
    states.create(replace(spent, tries_spent=record.budget.forward_limit))
    compensating = replace(
        transitions.claim(replace(record, order_id="o-2"), now=T0, claim_deadline=T0),
        process_state=ProcessState.COMPENSATING,
        compensation_log=(CompletedStep(STEPS[0], "res-1", T0),),
        undo_tries_spent=record.retry_budget,
    )
    states.create(compensating)
    report = sweep_at(states, T0 + timedelta(seconds=1))
    kinds = {r.record.order_id: r.kind for r in report.recoveries}
    assert kinds == {"o-1": RecoveryKind.GAVE_UP, "o-2": RecoveryKind.COMPENSATION_STALLED}
    gave_up, stalled = state_of(states, "o-1"), state_of(states, "o-2")
    assert (gave_up.process_state, gave_up.failure_count) == (ProcessState.ERROR, 1)
    assert "retry budget for its steps is spent" in str(gave_up.last_error)
    assert stalled.process_state is ProcessState.COMPENSATION_FAILED
    assert "retry budget for its undos is spent" in str(stalled.last_error)


# --- cost of one fault-free order ----------------------------------------------------------


def fault_free_order_cost(
    store_factory: StoreFactory, order_steps: tuple[str, ...]
) -> StoreMetrics:
    """The store operations of one order of `order_steps`, submitted, claimed, its order
    read and every step completed before its deadline."""
    metrics = StoreMetrics()
    stores = store_factory.open_stores(metrics)
    states, orders = stores
    accepted(stores, "o-1", order_steps)
    instance = claim_one(states)
    assert orders.get("o-1") is not None
    assert complete(states, instance, order_steps=order_steps).applied
    snapshot = metrics.snapshot()
    # Reads of this order: the orders database once, and its record as one item the starter's
    # claimable query served. The starter's running and Pending counts and its oldest Pending
    # record (C5, C9) are three queries per starter run, whatever it claims, and the
    # submission's backlog count (C5) one per recount interval, however many orders it admits
    # (here the one order's); none serves a record.
    point_reads = sum(
        cost.reads for kind, cost in snapshot.items() if kind is not OperationKind.QUERY
    )
    assert point_reads + snapshot[OperationKind.QUERY].items_read == 2
    assert snapshot[OperationKind.QUERY].reads == 5
    return metrics


def test_a_fault_free_order_costs_at_most_five_writes_and_two_reads(
    store_factory: StoreFactory,
) -> None:
    """A one-step order: its two creates, the claim, the write that begins the step and the
    one that finishes it."""
    metrics = fault_free_order_cost(store_factory, STEPS[:1])
    assert metrics.total().writes == 5
    assert metrics.snapshot()[OperationKind.FENCED_UPDATE].writes == 2


def test_a_fault_free_three_step_order_costs_seven_writes_and_two_reads(
    store_factory: StoreFactory,
) -> None:
    """Each further step costs one write, the one that begins it and completes the step
    before it (C1): the README's budget of a three-step order."""
    metrics = fault_free_order_cost(store_factory, STEPS)
    assert metrics.total().writes == 7
    assert metrics.snapshot()[OperationKind.FENCED_UPDATE].writes == 4


# --- orchestration reads and operator actions (D6, E8) -------------------------------------


def test_an_attempt_loads_its_order_and_a_missing_order_is_explained_d6(
    stores: tuple[StateStore, OrderStore],
) -> None:
    _, orders = stores
    submitted = accepted(stores, "o-1")
    assert load_order(orders, InstanceId("o-1", 1)) == submitted.order
    with pytest.raises(RecordNotFound, match="'o-2' of attempt o-2:1"):
        load_order(orders, InstanceId("o-2", 1))


def test_an_operator_resubmits_an_order_in_error_for_a_new_attempt_e8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    accepted(stores, "o-1")
    instance = claim_one(states)
    begin(states, instance, 0)
    assert fail(states, instance, 0, reason="permanent").applied
    resubmitted = resubmit_order(states, "o-1", T0 + timedelta(minutes=5))
    assert resubmitted.process_state is ProcessState.PENDING
    assert claim_one(states, T0 + timedelta(minutes=5)) == InstanceId("o-1", 2)
    with pytest.raises(IllegalTransition, match="only an order in Error"):
        resubmit_order(states, "o-1", T0 + timedelta(minutes=6))
    with pytest.raises(RecordNotFound, match="o-9"):
        resubmit_order(states, "o-9", T0)


def compensation_of(recovery: Recovery) -> Attempt:
    """The input the supervisor's Functions layer starts the requested compensation with."""
    assert recovery.compensation_instance is not None
    return from_data(
        compensation_input(
            recovery.record,
            recovery.compensation_instance,
            recovery.undo,
            SETTINGS.agent_transport,
            TIMEOUTS,
        ),
        Attempt,
    )


def test_giving_up_with_a_step_in_doubt_undoes_it_by_key_then_ends_in_error_u4_c1(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """Nothing completed, but the step that was running may have done its side effect with
    its answer lost: the give-up compensates under a new attempt, which undoes the step by
    its idempotency key, and no one hears of the order until that undo is done. Its first
    run stalls and the supervisor resumes it, still bound for Error; when it finishes the
    order is in Error, with a `failed` status and an `order-error` alert that give the
    give-up's reason and say nothing is left to undo (U4, C1, C2, E8); it is not resubmitted."""
    states, _ = stores
    settings = replace(SETTINGS, max_failures=2)
    new = transitions.new_record("o-1", "replies-a", T0, ("reserve-stock",))
    states.create(replace(new, failure_count=1))
    instance = claim_one(states)
    steps.begin_step(
        states,
        instance,
        Step(0, "reserve-stock"),
        done=None,
        now=T0,
        complete_by=step_deadline(T0, settings.timeouts),
    )
    gave_up_at = T0 + timedelta(seconds=31)

    [requested] = sweep_at(states, gave_up_at, settings).recoveries

    assert requested.kind is RecoveryKind.COMPENSATION_REQUESTED
    assert (requested.status, requested.alerts) == (None, ())
    assert requested.compensation_instance == InstanceId("o-1", 2)
    assert requested.undo == (Step(0, "reserve-stock", None),)
    assert compensation_of(requested).ends_in is ProcessState.ERROR
    record = state_of(states, "o-1")
    assert (record.process_state, record.locked_by, record.failure_count) == (
        ProcessState.COMPENSATING,
        "o-1:2",
        2,
    )
    assert record.compensation_ends_in is ProcessState.ERROR
    assert not steps.finish_steps(states, instance, Step(0, "reserve-stock", "r"), now=T0).applied

    stalled_at = gave_up_at + timedelta(seconds=settings.compensation_timeout_seconds + 1)
    [resumed] = sweep_at(states, stalled_at, settings).recoveries
    assert resumed.kind is RecoveryKind.COMPENSATION_RESUMED
    compensation = compensation_of(resumed)
    assert (compensation.instance, compensation.ends_in) == (
        InstanceId("o-1", 3),
        ProcessState.ERROR,
    )
    [undo] = resumed.undo
    begun = steps.begin_undo(
        states,
        compensation.instance,
        undo,
        undone=None,
        now=stalled_at,
        complete_by=compensation_deadline(stalled_at, TIMEOUTS),
        draw=settings.tries_per_request,
    )
    assert begun.applied
    # Its undo by key draws on the order's retry budget like any undo (C4).
    assert begun.tries == settings.tries_per_request
    assert state_of(states, "o-1").undo_tries_spent == settings.tries_per_request

    finished = steps.finish_undo(
        states, compensation.instance, undone=undo, now=stalled_at, ends_in=compensation.ends_in
    )

    assert finished.applied
    final = state_of(states, "o-1")
    assert (final.process_state, final.complete_by, final.failure_count) == (
        ProcessState.ERROR,
        None,
        2,
    )
    assert final.steps[0].state is StepState.COMPENSATED
    [failed] = finished.statuses
    assert failed.message_id == "o-1:failed:3"
    assert "MAX_FAILURES=2" in failed.body["reason"]
    assert finished.alert is not None
    assert (finished.alert.body["kind"], finished.alert.body["attempt"]) == ("order-error", 3)
    assert "MAX_FAILURES=2" in finished.alert.body["reason"]
    assert finished.alert.body["reason"].endswith("; nothing is left to undo")
    again = steps.finish_undo(
        states, compensation.instance, undone=undo, now=stalled_at, ends_in=compensation.ends_in
    )
    assert (again.statuses, again.alert) == (finished.statuses, finished.alert), "C8"
    assert sweep_at(states, stalled_at + timedelta(hours=1), settings).recoveries == ()
    # A new run would meet its own undone idempotency key: an operator may only cancel it.
    with pytest.raises(IllegalTransition, match="undid its steps by their idempotency keys"):
        resubmit_order(states, "o-1", stalled_at)


# --- retirement after the retention (C3, S2, S3) ------------------------------------------

RETENTION = timedelta(seconds=SETTINGS.finished_retention_seconds)
RETIRED_AT = T0 + RETENTION + timedelta(minutes=1)


async def retire_at(
    stores: tuple[StateStore, OrderStore],
    now: datetime,
    purged: list[str],
    *,
    failing_purge: bool = False,
) -> RetirementReport:
    """One retirement run at `now` with the supervisor's bounds (C3); `purged` gets the
    instance ids whose histories it purged."""
    states, orders = stores

    async def purge(instance_id: str) -> None:
        if failing_purge:
            raise ConnectionError("the task hub cannot be reached")
        purged.append(instance_id)

    return await retire_finished(
        states,
        orders,
        purge,
        now=now,
        retention=RETENTION,
        scan=SETTINGS.supervisor_policy.scan,
        blocking=blocking_calls.run,
    )


def completed_order(stores: tuple[StateStore, OrderStore], order_id: str) -> None:
    accepted(stores, order_id)
    assert complete(stores[0], claim_one(stores[0])).applied


async def test_a_retired_order_is_answered_with_its_final_status_and_runs_nothing_c3_s2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """Past the retention the order's document and histories go and its record stays as a
    tombstone (C3). A resend of the same order, far outside the reply queue's duplicate
    detection window, is answered with `completed` again under the same message id; no
    attempt is claimed and no order document is left behind (S2)."""
    states, orders = stores
    completed_order(stores, "o-1")
    purged: list[str] = []

    report = await retire_at(stores, RETIRED_AT, purged)

    assert (report.retired, report.failed, report.lost_races) == (1, 0, 0)
    assert purged == ["o-1:1"]
    assert orders.get("o-1") is None
    tombstone = state_of(states, "o-1")
    assert (tombstone.process_state, tombstone.retired_at) == (ProcessState.PROCESSED, RETIRED_AT)
    assert tombstone.body_hash == Order.from_document(json.loads(order_body("o-1"))).body_hash()

    later = RETIRED_AT + timedelta(days=400)
    resent = submit(stores, "o-1", now=later)

    assert isinstance(resent, Accepted), resent
    assert (resent.retired, resent.state_created) == (True, False)
    assert resent.status is not None
    assert resent.status.message_id == "o-1:completed:1"
    assert (resent.status.queue, resent.status.body["status"]) == ("replies-a", "completed")
    assert orders.get("o-1") is None
    assert claims_at(states, later).claims == ()
    assert state_of(states, "o-1").etag == tombstone.etag
    assert (await retire_at(stores, later, purged)).retired == 0


async def test_a_different_body_for_a_retired_order_is_a_conflict_and_leaves_nothing_s3_c3(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, orders = stores
    completed_order(stores, "o-1")
    await retire_at(stores, RETIRED_AT, [])

    result = submit(stores, "o-1", currency="USD", now=RETIRED_AT)

    assert isinstance(result, DeadLetter), result
    assert result.reason == ORDER_CONFLICT_REASON
    assert result.alert.body["kind"] == AlertKind.ORDER_CONFLICT.value
    assert "retired" in result.description
    assert orders.get("o-1") is None
    assert state_of(states, "o-1").process_state is ProcessState.PROCESSED


async def test_a_retirement_cut_short_is_finished_by_the_next_run_c3_c6(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """A record of an older version has no BodyHash: the retirement takes it from the order
    document before deleting it. A run whose purge fails leaves the record unretired, and
    the next run does what is left; a resend in between never runs the order again."""
    states, orders = stores
    completed_order(stores, "o-1")
    record = states.replace(replace(state_of(states, "o-1"), body_hash=None))
    expected_hash = Order.from_document(json.loads(order_body("o-1"))).body_hash()

    cut_short = await retire_at(stores, RETIRED_AT, [], failing_purge=True)

    assert (cut_short.retired, cut_short.failed) == (0, 1)
    assert orders.get("o-1") is None
    halfway = state_of(states, "o-1")
    assert (halfway.retired_at, halfway.body_hash) == (None, expected_hash)
    assert halfway.etag != record.etag
    purged: list[str] = []
    finished = await retire_at(stores, RETIRED_AT, purged)
    assert (finished.retired, finished.failed, purged) == (1, 0, ["o-1:1"])
    assert state_of(states, "o-1").retired_at == RETIRED_AT


async def test_an_operator_cannot_resubmit_or_cancel_a_retired_order_c3_e8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    accepted(stores, "o-1")
    instance = claim_one(states)
    begin(states, instance, 0)
    assert fail(states, instance, 0, reason="permanent").applied
    await retire_at(stores, RETIRED_AT, [])

    with pytest.raises(IllegalTransition, match="retired"):
        resubmit_order(states, "o-1", RETIRED_AT)
    with pytest.raises(IllegalTransition, match="retired"):
        cancel_order(states, "o-1", RETIRED_AT, timeouts=TIMEOUTS, reason="too late")
    assert state_of(states, "o-1").process_state is ProcessState.ERROR


async def test_an_order_document_a_crashed_resend_left_is_removed_by_its_redelivery_c3_c6(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """A resend of a retired order that wrote the order document and crashed before deleting
    it again: its redelivery finds the document in place and still removes it (C3, C6)."""
    _, orders = stores
    completed_order(stores, "o-1")
    await retire_at(stores, RETIRED_AT, [])
    orders.create(Order.from_document(json.loads(order_body("o-1"))))

    redelivered = submit(stores, "o-1", now=RETIRED_AT)

    assert isinstance(redelivered, Accepted), redelivered
    assert redelivered.retired
    assert orders.get("o-1") is None


async def test_an_order_document_a_resend_writes_during_the_retirement_is_removed_c3(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """A resend that writes the order document again while the retirement purges finds the
    record not yet retired and leaves the document; the retirement deletes it once more
    after marking the record (C3)."""
    states, orders = stores
    completed_order(stores, "o-1")

    async def purge_while_a_resend_arrives(instance_id: str) -> None:
        assert isinstance(submit(stores, "o-1", now=RETIRED_AT), Accepted)

    await retire_finished(
        states,
        orders,
        purge_while_a_resend_arrives,
        now=RETIRED_AT,
        retention=RETENTION,
        scan=SETTINGS.supervisor_policy.scan,
        blocking=blocking_calls.run,
    )

    assert state_of(states, "o-1").retired_at == RETIRED_AT
    assert orders.get("o-1") is None
