"""The metrics of the telemetry contract move when the service layer runs real order paths
over each store backend (C9), read with the OpenTelemetry SDK's in-memory reader.

Paths: an accepted order through three steps to Processed (S2, D1, D4, E5) with an agent
that retries once (E7); a refused submission at the backlog bound (C5); a first step that
fails for good (E8, Error) and a later one that is undone (C1, Compensated) or whose undo
fails (C2, CompensationFailed); expired attempts the supervisor retries and then gives up
(U1, U5), and one older than the catch-up window (U2). An activity that runs twice (C8)
counts its order once.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from adapters.cosmos_store import CosmosStateStore
from config import Settings
from domain.agent_messages import AgentOutcome, AgentRequest
from domain.contracts import Submission, parse_submission
from domain.policies import CircuitBreaker, compensation_deadline, step_deadline
from domain.ports import OrderStore, StateStore
from domain.records import InstanceId, ProcessState
from domain.workflow import Step
from observability import metrics
from order_agents.call_policy import run_agent
from order_agents.service_client import Done, PermanentFailure, RemoteResult, TransientFailure
from services import steps
from services.admission import BacklogGate
from services.starter import claim_pending
from services.steps import Written
from services.submission import Accepted, Rejected, submit_order
from services.supervisor import RecoveryKind, catch_up, sweep
from tests.support.metric_points import gauge, histogram, points, total

T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
STEPS = ("reserve-stock", "charge-payment", "ship-order")
SETTINGS = Settings(
    reply_queues=frozenset({"replies-a"}),
    step_timeout_seconds=30,
    claim_timeout_seconds=60,
    max_failures=2,
    retry_delay_seconds=0,
    long_wait_after_failures=3,
)

CUSTOMER = "customer-1"


def order_body(order_id: str) -> str:
    return json.dumps(
        {
            "schemaVersion": 1,
            "orderId": order_id,
            "customerId": CUSTOMER,
            "items": [{"sku": "sku-1", "quantity": 1}],
            "currency": "EUR",
        }
    )


def submit(
    stores: tuple[StateStore, OrderStore],
    order_id: str,
    *,
    gate: BacklogGate | None = None,
    now: datetime = T0,
) -> Accepted | Rejected:
    states, orders = stores
    result = submit_order(
        order_body(order_id),
        reply_to="replies-a",
        message_id=order_id,
        orders=orders,
        states=states,
        admission=gate or BacklogGate(lambda at_most: 0, bound=100, recount_seconds=60),
        reply_queues=SETTINGS.reply_queues,
        now=now,
        steps=STEPS,
    )
    assert isinstance(result, Accepted | Rejected), result
    return result


def claim_all(states: StateStore, now: datetime) -> dict[str, InstanceId]:
    """One starter run (D1-D3): the attempts it claimed, by order id."""
    run = claim_pending(
        states,
        now,
        bounds=SETTINGS.starter_scan,
        timeouts=SETTINGS.timeouts,
        max_running=SETTINGS.max_running_orders,
        max_backlog=SETTINGS.max_backlog_orders,
    )
    return {won.record.order_id: won.instance_id for won in run.claims}


def claim(states: StateStore, now: datetime) -> InstanceId:
    (won,) = claim_all(states, now).values()
    return won


def begin(states: StateStore, instance: InstanceId, index: int, now: datetime) -> Written:
    done = None if index == 0 else Step(index - 1, STEPS[index - 1], f"ref-{index - 1}")
    outcome = steps.begin_step(
        states,
        instance,
        Step(index, STEPS[index]),
        done=done,
        now=now,
        complete_by=step_deadline(now, SETTINGS.timeouts),
    )
    assert outcome.applied
    return outcome


def fail(
    states: StateStore, instance: InstanceId, index: int, now: datetime, reason: str
) -> Written:
    """Step `index` of `instance` failed for good at `now`."""
    return steps.fail_step(
        states,
        instance,
        Step(index, STEPS[index]),
        reason=reason,
        now=now,
        compensate_by=compensation_deadline(now, SETTINGS.timeouts),
    )


async def agent_answer(
    instance: InstanceId, step: str, results: list[RemoteResult], seconds_per_try: float
) -> AgentOutcome:
    """Run the call policy over `results`, one per try; each try takes `seconds_per_try` on
    a clock that only the tries move."""
    clock = [T0]

    async def call(timeout_seconds: float) -> RemoteResult:
        clock[0] += timedelta(seconds=seconds_per_try)
        return results.pop(0)

    async def no_wait(seconds: float) -> None:
        return None

    submission = parse_submission(order_body(instance.order_id), None, frozenset())
    assert isinstance(submission, Submission)
    request = AgentRequest(
        instance_id=str(instance),
        step=step,
        order=submission.order,
        deadline=T0 + timedelta(minutes=5),
    )
    response = await run_agent(
        request,
        call,
        CircuitBreaker(failure_threshold=5, reset_seconds=30, clock=lambda: 0.0),
        SETTINGS.agent_policy,
        tries=SETTINGS.tries_per_request,
        now=lambda: clock[0],
        sleep=no_wait,
        jitter=lambda: 0.0,
    )
    return response.outcome


async def test_an_order_through_every_step_moves_the_order_and_step_instruments_c9(
    reader: InMemoryMetricReader, stores: tuple[StateStore, OrderStore]
) -> None:
    states, _ = stores
    assert isinstance(submit(stores, "o-1"), Accepted)
    assert isinstance(submit(stores, "o-1"), Accepted)  # a resend stores nothing new (S2)
    instance = claim(states, T0 + timedelta(seconds=4))
    for index, step in enumerate(STEPS):
        begin(states, instance, index, T0 + timedelta(seconds=5 + index))
        tries = [TransientFailure("503"), Done(f"ref-{index}")]
        outcome = await agent_answer(instance, step, tries if index == 1 else tries[1:], 0.25)
        assert outcome is AgentOutcome.SUCCEEDED
    last = Step(2, STEPS[2], "ref-2")
    finished_at = T0 + timedelta(seconds=12)
    for _ in range(2):  # the activity runs twice (C8): the second finds Processed
        outcome = steps.finish_steps(states, instance, last, now=finished_at)
        assert outcome.applied

    found = points(reader)
    assert total(found, metrics.ORDERS_RECEIVED) == 1
    assert total(found, metrics.ORDERS_COMPLETED) == 1
    for name in (metrics.ORDERS_FAILED, metrics.ORDERS_COMPENSATED, metrics.ORDERS_REJECTED):
        assert total(found, name) == 0
    duration = histogram(found, metrics.ORDER_DURATION, **{"order.state": "Processed"})
    assert (duration.count, duration.sum) == (1, 12.0)
    assert total(found, metrics.STEP_RETRIES, step="charge-payment") == 1
    assert total(found, metrics.STEP_RETRIES) == 1
    payment = histogram(found, metrics.STEP_DURATION, step="charge-payment", outcome="succeeded")
    assert (payment.count, payment.sum) == (1, 0.5)
    stock = histogram(found, metrics.STEP_DURATION, step="reserve-stock", outcome="succeeded")
    assert (stock.count, stock.sum) == (1, 0.25)
    assert total(found, metrics.STEP_FAILURES) == 0
    # The starter read the order Pending since its submission, 4 s before it claimed it.
    assert gauge(found, metrics.BACKLOG_OLDEST_PENDING_AGE) == 4.0


async def test_failures_for_good_count_error_compensated_and_compensation_failed_c9(
    reader: InMemoryMetricReader, stores: tuple[StateStore, OrderStore]
) -> None:
    states, _ = stores
    for order_id in ("o-error", "o-undone", "o-stuck"):
        submit(stores, order_id)
    claimed = claim_all(states, T0)
    # o-error: the first step is refused for good; nothing to undo (E8).
    error = claimed["o-error"]
    begin(states, error, 0, T0)
    assert await agent_answer(error, STEPS[0], [PermanentFailure("no stock")], 1) is (
        AgentOutcome.FAILED
    )
    failed = fail(states, error, 0, T0 + timedelta(seconds=3), "no stock")
    assert failed.record is not None
    assert failed.record.process_state is ProcessState.ERROR
    # o-undone and o-stuck: the payment is refused after the stock was reserved (C1).
    for order_id, undo_works in (("o-undone", True), ("o-stuck", False)):
        instance = claimed[order_id]
        begin(states, instance, 0, T0)
        begin(states, instance, 1, T0 + timedelta(seconds=1))
        compensating = fail(states, instance, 1, T0 + timedelta(seconds=2), "declined")
        assert Step(0, STEPS[0], "ref-0") in compensating.undo
        end = T0 + timedelta(seconds=10)
        undone: Step | None = None
        for undo in compensating.undo:  # newest first, the refused payment in doubt too
            steps.begin_undo(
                states,
                instance,
                undo,
                undone=undone,
                now=T0 + timedelta(seconds=3),
                complete_by=compensation_deadline(T0 + timedelta(seconds=3), SETTINGS.timeouts),
            )
            if not undo_works:
                steps.undo_failed(states, instance, undo, reason="refused", now=end)
                break
            undone = undo
        else:
            steps.finish_undo(states, instance, undone=undone, now=end)

    found = points(reader)
    assert total(found, metrics.ORDERS_RECEIVED) == 3
    assert total(found, metrics.ORDERS_FAILED) == 1
    assert total(found, metrics.ORDERS_COMPENSATED) == 1
    assert total(found, metrics.ORDERS_COMPENSATION_FAILED) == 1
    assert total(found, metrics.ORDERS_COMPLETED) == 0
    assert histogram(found, metrics.ORDER_DURATION, **{"order.state": "Error"}).sum == 3.0
    assert histogram(found, metrics.ORDER_DURATION, **{"order.state": "Compensated"}).sum == 10.0
    assert total(found, metrics.STEP_FAILURES, step=STEPS[0], reason="failed") == 1
    refused = histogram(found, metrics.STEP_DURATION, step=STEPS[0], outcome="failed")
    assert (refused.count, refused.sum) == (1, 1.0)


def test_a_submission_refused_at_the_backlog_bound_is_counted_with_its_reason_c5(
    reader: InMemoryMetricReader, stores: tuple[StateStore, OrderStore]
) -> None:
    states, _ = stores
    gate = BacklogGate(
        lambda at_most: states.count_backlog(at_most=at_most), bound=2, recount_seconds=0
    )
    results = [submit(stores, f"o-{n}", gate=gate) for n in range(3)]
    assert [type(result) for result in results] == [Accepted, Accepted, Rejected]

    found = points(reader)
    assert total(found, metrics.ORDERS_RECEIVED) == 2
    assert total(found, metrics.ORDERS_REJECTED, reason=metrics.REJECTED_BACKLOG_FULL) == 1
    # The gauge reports the gate's own count: two unfinished orders, the bound.
    assert gauge(found, metrics.BACKLOG_UNFINISHED) == 2


def claim_capped(states: StateStore, now: datetime, max_running: int) -> int:
    """One starter run under a running cap of `max_running` (C5): how many it claimed."""
    run = claim_pending(
        states,
        now,
        bounds=SETTINGS.starter_scan,
        timeouts=SETTINGS.timeouts,
        max_running=max_running,
        max_backlog=SETTINGS.max_backlog_orders,
    )
    return len(run.claims)


def backlog_gauges(reader: InMemoryMetricReader) -> tuple[float, float, float]:
    found = points(reader)
    return (
        gauge(found, metrics.BACKLOG_PENDING),
        gauge(found, metrics.BACKLOG_UNFINISHED),
        gauge(found, metrics.BACKLOG_OLDEST_PENDING_AGE),
    )


def test_each_starter_run_refreshes_the_backlog_gauges_while_no_submission_arrives_c5_c9(
    reader: InMemoryMetricReader, stores: tuple[StateStore, OrderStore]
) -> None:
    """Pending (waiting to be started) and unfinished (Pending, Processing, Compensating) are
    told apart, and each starter run sets them from its counts at its start, with the age of
    the oldest Pending order it read: the gauges follow the store with no submission."""
    states, _ = stores
    for order_id in ("o-1", "o-2", "o-3"):
        submit(stores, order_id)
    assert metrics.BACKLOG_PENDING not in points(reader), "no starter run yet"

    assert claim_capped(states, T0 + timedelta(seconds=5), max_running=1) == 1
    assert backlog_gauges(reader) == (3, 3, 5.0)

    assert claim_capped(states, T0 + timedelta(seconds=6), max_running=1) == 0
    assert backlog_gauges(reader) == (2, 3, 6.0), "at the cap: the oldest Pending order waits on"

    # The running order fails for good (Error); the next run starts from two Pending orders
    # and nothing running.
    (instance,) = [
        InstanceId(record.order_id, record.attempt)
        for record in (states.get(order_id) for order_id in ("o-1", "o-2", "o-3"))
        if record is not None and record.process_state is ProcessState.PROCESSING
    ]
    begin(states, instance, 0, T0 + timedelta(seconds=7))
    failed = fail(states, instance, 0, T0 + timedelta(seconds=8), "no stock")
    assert failed.record is not None
    assert failed.record.process_state is ProcessState.ERROR
    assert claim_capped(states, T0 + timedelta(seconds=9), max_running=1) == 1
    assert backlog_gauges(reader) == (2, 2, 9.0)


def test_the_oldest_pending_age_counts_orders_no_run_can_claim_yet_c5_u4_c9(
    reader: InMemoryMetricReader, stores: tuple[StateStore, OrderStore]
) -> None:
    """The backlog's age is the oldest Pending order's, asked of the store each run: an order
    that arrived while the cap was full, and one waiting out its retry delay, age on the
    gauge although the starter's scan cannot claim them (and reads nothing at the cap)."""
    states, _ = stores
    submit(stores, "o-1")
    assert claim_capped(states, T0 + timedelta(seconds=1), max_running=1) == 1
    assert backlog_gauges(reader) == (1, 1, 1.0)

    submit(stores, "o-2", now=T0 + timedelta(seconds=2))
    assert claim_capped(states, T0 + timedelta(seconds=10), max_running=1) == 0
    assert backlog_gauges(reader) == (1, 2, 8.0), "at the cap, the order since submitted waits"

    # o-1's attempt expires; the supervisor makes it Pending again behind a 60 s retry delay.
    record = states.get("o-1")
    assert record is not None
    instance = InstanceId("o-1", record.attempt)
    begin(states, instance, 0, T0 + timedelta(seconds=10))
    delayed = Settings(
        reply_queues=SETTINGS.reply_queues,
        step_timeout_seconds=SETTINGS.step_timeout_seconds,
        retry_delay_seconds=60,
    )
    swept_at = T0 + timedelta(seconds=41)
    report = sweep(states, swept_at, policy=delayed.supervisor_policy, timeouts=delayed.timeouts)
    assert [recovery.kind for recovery in report.recoveries] == [RecoveryKind.RETRY]

    assert claim_capped(states, swept_at + timedelta(seconds=9), max_running=2) == 1
    assert backlog_gauges(reader) == (2, 2, 48.0), "o-2, Pending since T0 + 2 s, is claimed"
    assert claim_capped(states, swept_at + timedelta(seconds=10), max_running=2) == 0
    assert backlog_gauges(reader) == (1, 2, 10.0), "o-1 waits out its retry delay, Pending"


def test_the_supervisor_counts_what_it_read_its_charge_and_its_give_ups_u2_u5(
    reader: InMemoryMetricReader, stores: tuple[StateStore, OrderStore]
) -> None:
    states, _ = stores
    submit(stores, "o-late")
    now = T0
    kinds = []
    charge = 0.0
    for _ in range(SETTINGS.max_failures):
        instance = claim(states, now)
        begin(states, instance, 0, now)
        now += timedelta(seconds=SETTINGS.step_timeout_seconds + 1)
        report = sweep(states, now, policy=SETTINGS.supervisor_policy, timeouts=SETTINGS.timeouts)
        kinds += [recovery.kind for recovery in report.recoveries]
        charge += report.request_charge
    # The first step was running when the order gave up: it is undone before Error (U4).
    assert kinds == [RecoveryKind.RETRY, RecoveryKind.COMPENSATION_REQUESTED]

    found = points(reader)
    assert total(found, metrics.SUPERVISOR_ITEMS_READ, scan="sweep") == 2
    # What the scans reported: Cosmos DB's request units, none on SQLite.
    assert total(found, metrics.SUPERVISOR_REQUEST_CHARGE, scan="sweep") == pytest.approx(charge)
    assert (charge > 0) is isinstance(states, CosmosStateStore)
    assert total(found, metrics.SUPERVISOR_GIVEUPS, recovery="compensation") == 1
    assert total(found, metrics.ORDERS_FAILED) == 0, "not before the step in doubt is undone"
    undoing = InstanceId("o-late", SETTINGS.max_failures + 1)
    undo = Step(0, STEPS[0])
    deadline = compensation_deadline(now, SETTINGS.timeouts)
    assert steps.begin_undo(
        states, undoing, undo, undone=None, now=now, complete_by=deadline
    ).applied
    ended = steps.finish_undo(states, undoing, undone=undo, now=now, ends_in=ProcessState.ERROR)
    assert ended.applied
    assert total(points(reader), metrics.ORDERS_FAILED) == 1
    expired = total(found, metrics.STEP_FAILURES, step=STEPS[0], reason="deadline-expired")
    assert expired == 2
    # The second claim found the order Pending again since the retry made it so.
    assert gauge(found, metrics.BACKLOG_OLDEST_PENDING_AGE) == 0.0


def test_the_catch_up_counts_its_scan_beyond_its_window_apart_u2(
    reader: InMemoryMetricReader, stores: tuple[StateStore, OrderStore]
) -> None:
    """What the catch-up read and paid beyond its window is recorded under its own `scan`
    attribute, `beyond-window`, next to the catch-up window's own."""
    states, _ = stores
    submit(stores, "o-ancient")
    claim(states, T0)
    now = T0 + timedelta(seconds=2 * SETTINGS.supervisor_catchup_window_seconds)
    report = catch_up(states, now, policy=SETTINGS.supervisor_policy, timeouts=SETTINGS.timeouts)
    beyond = report.beyond_window
    assert beyond is not None
    assert [recovery.record.order_id for recovery in beyond.recoveries] == ["o-ancient"]

    found = points(reader)
    assert total(found, metrics.SUPERVISOR_ITEMS_READ, scan="beyond-window") == 1
    assert total(found, metrics.SUPERVISOR_ITEMS_READ, scan="catch-up") == 0
    charge = total(found, metrics.SUPERVISOR_REQUEST_CHARGE, scan="beyond-window")
    assert charge == pytest.approx(beyond.request_charge)
    assert (charge > 0) is isinstance(states, CosmosStateStore)


def test_durations_fall_in_second_buckets_fine_enough_for_a_local_step(
    reader: InMemoryMetricReader,
) -> None:
    # A 30 ms answer lands in the (0.025, 0.05] bucket, not in the SDK's default (0, 5].
    metrics.step_answered(STEPS[0], "completed", 0.03)
    [point] = points(reader)[metrics.STEP_DURATION]
    assert tuple(point.explicit_bounds) == metrics.DURATION_BUCKETS_SECONDS
    upper = point.explicit_bounds[list(point.bucket_counts).index(1)]
    assert upper == 0.05
    # Consumer lag is read from the broker, not declared by the app (see docs/architecture.md).
    assert "sas.consumer.lag" not in points(reader)
