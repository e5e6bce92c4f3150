"""Failures through the real pipeline: E8 permanent errors, E6 timer first, U4 supervisor
retries and give-up, U2 the catch-up of an order stuck past the sweep window, D4/E5 stale
attempts with E7 fencing and idempotency at the target.

Each step service's fault rules target one order (and one attempt), so each test shows one
failure mode at one step of the three; step timeouts are short so every recovery happens
within seconds. A step that fails for good after an earlier one completed is compensated
(C1): tests/e2e/test_e2e_compensation.py. Here the failures that end in Error hit the first
step, where nothing is left to undo.
"""

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.functions.timer import TimerRequest
from devhost.testing import eventually

import bootstrap
from adapters.codec import to_json
from domain.agent_messages import AgentOutcome, AgentRequest, AgentResponse
from domain.records import ProcessState, StepState, format_utc
from orchestrators.order_workflow import (
    BEGIN_STEP,
    BEGIN_UNDO,
    FAIL_STEP,
    FINISH_STEPS,
    FINISH_UNDO,
)
from tests.e2e.e2e_helpers import (
    AGENT_RESPONSES,
    ALERTS,
    E2E,
    QUICK_RECOVERY,
    REPLIES,
    STEP_SERVICES,
    STOCK_REQUESTS,
    order_body,
    raised_events,
    running_pipeline,
    scheduled_activities,
)
from tools.simulators.services import FaultKind, FaultPlan, FaultRule, SideEffectKind

FINAL_WRITES = {FINISH_STEPS, FAIL_STEP}
ENDED_WITHOUT_WRITING = {"timed-out", "gave-up"}


def faults_for(*rules: FaultRule) -> FaultPlan:
    return FaultPlan(rules=rules)


def _trail(replies: list[Any]) -> list[tuple[str, str | None, int | None]]:
    return [(m.body["status"], m.body["step"], m.body["attempt"]) for m in replies]


def _effects(e2e: E2E, service: str, order_id: str) -> list[tuple[SideEffectKind, int]]:
    """The side effects `service` performed for the order, in order, with their attempt."""
    return [(e.kind, e.attempt) for e in e2e.pipeline.services.ledger_entries(service, order_id)]


def _requests(e2e: E2E, service: str) -> int:
    return int(e2e.pipeline.services.stats(service)["requests"])


async def test_e8_e7_a_declined_first_step_delivered_again_after_error_reserves_nothing(
    tmp_path: Path,
) -> None:
    """E8, E7: the stock service declines the first step once and the order ends in Error at
    once, with no undo. The same agent request (its attempt, key and fencing token) is then
    delivered again while the service plans no fault; it is sent under a new MessageId, as one
    past the broker's duplicate detection arrives. The service declines it again from its
    ledger, so the stock ledger holds no reservation for the order in Error."""
    stock = faults_for(
        FaultRule(FaultKind.PERMANENT, order_id="o-again", operation="reserve", times=1)
    )
    async with running_pipeline(
        tmp_path, service_faults={"stock": stock}, settings=QUICK_RECOVERY, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body("o-again"), message_id="o-again")
        await e2e.statuses("o-again", "failed")
        # Once what Error owed went out and its outbox was cleared, the record stays as it is.
        in_error = await e2e.wait_for_record(
            "o-again",
            lambda r: r.process_state is ProcessState.ERROR and r.owed is None,
            "Error, its outbox cleared",
        )
        order = await e2e.stored_order("o-again")
        assert order is not None
        request = AgentRequest(
            instance_id="o-again:1",
            step="reserve-stock",
            order=order,
            deadline=bootstrap.now() + timedelta(minutes=5),
        )

        await e2e.send(
            STOCK_REQUESTS,
            to_json(request),
            message_id=f"{request.message_id}:again",
            correlation_id="o-again",
        )

        await eventually(lambda: _requests(e2e, "stock") == 2, "the request delivered again")
        assert _effects(e2e, "stock", "o-again") == [], "a reservation for an order in Error"
        assert e2e.pipeline.services.stats("stock")["declines_replayed"] == 1
        assert await e2e.record("o-again") == in_error


async def test_e8_a_permanent_failure_ends_in_error_without_retries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """E8: the stock service answers `permanent` to the first step -> ProcessState Error, an
    `order-error` alert, a `failed` status with the service's reason; nothing completed, so
    nothing is undone and the later steps' services are never asked; the supervisor retries
    nothing."""
    caplog.set_level(logging.INFO, logger="app.supervisor")
    stock = faults_for(FaultRule(FaultKind.PERMANENT, order_id="o-perm", operation="reserve"))
    async with running_pipeline(
        tmp_path, service_faults={"stock": stock}, settings=QUICK_RECOVERY, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body("o-perm"), message_id="o-perm")

        replies = await e2e.statuses("o-perm", "failed")

        assert [m.body["status"] for m in replies] == ["received", "failed"]
        failed = replies[-1].body
        assert failed["attempt"] == 1
        assert "permanent" in failed["reason"]
        [alert] = await e2e.count_of(ALERTS, 1)
        assert (alert.body["kind"], alert.body["orderId"]) == ("order-error", "o-perm")
        assert "permanent" in alert.body["reason"]
        in_error = await e2e.record("o-perm")
        assert in_error is not None
        assert (in_error.process_state, in_error.failure_count) == (ProcessState.ERROR, 0)
        assert [step.state for step in in_error.steps] == [
            StepState.FAILED,
            StepState.NOT_STARTED,
            StepState.NOT_STARTED,
        ]
        assert in_error.compensation_log == ()
        instance = await e2e.finished_instance("o-perm:1")
        assert scheduled_activities(instance) == [BEGIN_STEP, FAIL_STEP]

        sweeps_before = _sweeps(caplog)
        await eventually(lambda: _sweeps(caplog) >= sweeps_before + 2, "two more supervisor sweeps")

        after_sweeps = await e2e.record("o-perm")
        assert after_sweeps == in_error, "the supervisor left the order in Error alone"
        assert await e2e.instance("o-perm:2") is None
        assert _requests(e2e, "stock") == 1, "a permanent failure is not retried by the agent"
        for service in STEP_SERVICES:
            assert _effects(e2e, service, "o-perm") == [], f"{service} did something"
            assert e2e.pipeline.services.tombstones(service, "o-perm") == []
        assert (_requests(e2e, "payment"), _requests(e2e, "shipping")) == (0, 0)
        assert await e2e.pending(REPLIES) == []


async def test_e6_u4_an_agent_that_never_answers_is_retried_then_given_up(
    tmp_path: Path,
) -> None:
    """E6: every call of the first step hangs, so the durable timer wins and each attempt's
    orchestration ends without writing the record. U4: the supervisor counts each expired
    attempt and asks for a new one (instance ids `{orderId}:{n}`); at MAX_FAILURES, with no
    step completed but the first one in doubt, attempt 4 undoes it by its idempotency key
    (nothing was reserved: the key is closed for good), and the order goes to Error with an
    `order-error` alert and a `failed` status; no later step is ever asked."""
    stock = faults_for(FaultRule(FaultKind.HANG, order_id="o-hang", operation="reserve"))
    # No room for a healthy step is needed here: 2 s instead of 10 also ends each hung call soon.
    settings = {**QUICK_RECOVERY, "STEP_TIMEOUT_SECONDS": "2"}
    async with running_pipeline(
        tmp_path, service_faults={"stock": stock}, settings=settings, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body("o-hang"), message_id="o-hang")

        async with e2e.watching("o-hang") as versions:
            replies = await e2e.statuses("o-hang", "failed")

        assert [m.body["status"] for m in replies] == ["received", "failed"]
        assert replies[-1].body["attempt"] == 4
        assert "MAX_FAILURES=3" in replies[-1].body["reason"]
        [alert] = await e2e.count_of(ALERTS, 1)
        assert (alert.body["kind"], alert.body["attempt"]) == ("order-error", 4)
        record = await e2e.record("o-hang")
        assert record is not None
        assert (record.process_state, record.failure_count, record.attempt) == (
            ProcessState.ERROR,
            3,
            4,
        )
        assert record.compensation_log == ()
        for attempt in (1, 2, 3):
            instance = await e2e.finished_instance(f"o-hang:{attempt}")
            assert instance.output["outcome"] in ENDED_WITHOUT_WRITING
            assert instance.output["step"] == "reserve-stock"
            assert scheduled_activities(instance) == [BEGIN_STEP], "no write after the begin"
        undone = await e2e.finished_instance("o-hang:4")
        assert scheduled_activities(undone) == [BEGIN_UNDO, FINISH_UNDO]
        assert await e2e.instance("o-hang:5") is None
        for service in STEP_SERVICES:
            assert _effects(e2e, service, "o-hang") == [], f"{service} did something"
        [closed] = e2e.pipeline.services.tombstones("stock", "o-hang")
        assert (closed.idempotency_key, closed.attempt) == ("o-hang:reserve-stock", 4)
        assert (_requests(e2e, "payment"), _requests(e2e, "shipping")) == (0, 0)
        counted = [v.failure_count for v in versions]
        assert sorted(set(counted)) == [0, 1, 2, 3]
        assert counted == sorted(counted), "FailureCount only grows"
        claimed = [v.locked_by for v in versions if v.process_state is ProcessState.PROCESSING]
        assert list(dict.fromkeys(claimed)) == ["o-hang:1", "o-hang:2", "o-hang:3"]


async def test_u4_a_fault_that_heals_after_the_first_attempt_completes_on_the_second(
    tmp_path: Path,
) -> None:
    """E6, E9, U4: attempt 1 reserves the stock, then every call of its charge is transient,
    so the payment agent gives up within its deadline and the record waits for the
    supervisor; attempt 2 resumes at the charge (the stock service is not asked again, C10),
    meets a healed payment service and the app hears `completed` with attempt 2."""
    payment = faults_for(
        FaultRule(FaultKind.TRANSIENT, order_id="o-heal", operation="charge", attempt=1)
    )
    async with running_pipeline(
        tmp_path, service_faults={"payment": payment}, settings=QUICK_RECOVERY, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body("o-heal"), message_id="o-heal")

        replies = await e2e.statuses("o-heal", "completed")

        assert _trail(replies) == [
            ("received", None, None),
            ("in-progress", "reserve-stock", 1),
            ("in-progress", "charge-payment", 2),
            ("in-progress", "ship-order", 2),
            ("completed", None, 2),
        ]
        record = await e2e.record("o-heal")
        assert record is not None
        assert (record.process_state, record.locked_by, record.failure_count) == (
            ProcessState.PROCESSED,
            "o-heal:2",
            1,
        )
        first = await e2e.finished_instance("o-heal:1")
        assert first.output == {"outcome": "gave-up", "step": "charge-payment"}
        assert FINAL_WRITES.isdisjoint(scheduled_activities(first))
        assert _effects(e2e, "stock", "o-heal") == [(SideEffectKind.RESERVATION, 1)]
        assert _effects(e2e, "payment", "o-heal") == [(SideEffectKind.PAYMENT, 2)]
        assert _effects(e2e, "shipping", "o-heal") == [(SideEffectKind.SHIPMENT, 2)]
        assert _requests(e2e, "stock") == 1
        assert e2e.pipeline.services.stats("payment")["faults_injected"]["transient"] >= 1


async def test_d4_e5_e7_a_stale_attempt_changes_nothing_and_nothing_happens_twice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """D4/E5: attempt 1 reserves and charges, then ships the order but the shipping answer is
    lost and its retry outlasts the step timeout, so its timer fires first and it ends
    without writing. E7/C8: attempt 2 resumes at the last step, sends the same idempotency
    key with a higher fencing token and the service replays the same shipment: one side
    effect. The stale attempt's success response, delivered afterwards, changes nothing."""
    caplog.set_level(logging.INFO, logger="app.agent_bridge")
    shipping = faults_for(
        FaultRule(FaultKind.LOST_RESPONSE, order_id="o-stale", attempt=1, times=1),
        FaultRule(FaultKind.LATENCY, order_id="o-stale", attempt=1, skip=1, delay_seconds=30),
    )
    async with running_pipeline(
        tmp_path, service_faults={"shipping": shipping}, settings=QUICK_RECOVERY, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body("o-stale"), message_id="o-stale")

        replies = await e2e.statuses("o-stale", "completed")

        assert _trail(replies) == [
            ("received", None, None),
            ("in-progress", "reserve-stock", 1),
            ("in-progress", "charge-payment", 1),
            ("in-progress", "ship-order", 2),
            ("completed", None, 2),
        ]
        stale = await e2e.finished_instance("o-stale:1")
        assert stale.output["outcome"] in ENDED_WITHOUT_WRITING
        assert FINAL_WRITES.isdisjoint(scheduled_activities(stale))
        [shipment] = e2e.pipeline.services.ledger_entries("shipping", "o-stale")
        assert shipment.attempt == 1, "attempt 1 performed the side effect"
        current = await e2e.finished_instance("o-stale:2")
        assert scheduled_activities(current) == [BEGIN_STEP, FINISH_STEPS]
        [answer] = raised_events(current)
        assert answer["outcome"] == "succeeded"
        assert answer["reference"] == shipment.resource_id
        stats = e2e.pipeline.services.stats("shipping")
        assert stats["double_side_effects"] == 0
        assert stats["replays"] >= 1
        assert (_requests(e2e, "stock"), _requests(e2e, "payment")) == (1, 1)
        completed = await e2e.record("o-stale")
        assert completed is not None
        assert (completed.process_state, completed.locked_by, completed.failure_count) == (
            ProcessState.PROCESSED,
            "o-stale:2",
            1,
        )
        assert completed.steps[-1].reference == shipment.resource_id

        await e2e.send(
            AGENT_RESPONSES,
            _stale_success("o-stale:1", "ship-order", shipment.resource_id),
            message_id="o-stale:1:ship-order:response:late",
        )
        await eventually(
            lambda: "late agent response dropped instance.id=o-stale:1" in caplog.text,
            "the stale attempt's late response dropped",
        )

        assert await e2e.record("o-stale") == completed
        assert await e2e.pending(AGENT_RESPONSES, dead_letters=True) == []
        assert await e2e.pending(REPLIES) == []


def _sweeps(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for r in caplog.records if r.name == "app.supervisor" and "sweep" in r.message)


def _stale_success(instance_id: str, step: str, reference: str) -> str:
    return to_json(
        AgentResponse(
            request_id=f"{instance_id}:{step}",
            instance_id=instance_id,
            outcome=AgentOutcome.SUCCEEDED,
            reference=reference,
        )
    )


@pytest.mark.parametrize(
    ("catch_up_window_seconds", "escaped"),
    [
        (None, "SUPERVISOR_WINDOW_SECONDS"),
        (2, "SUPERVISOR_CATCHUP_WINDOW_SECONDS"),
    ],
    ids=["past-the-sweep-window", "past-the-catch-up-window"],
)
async def test_u2_an_order_stuck_past_the_sweep_window_is_recovered_and_alerted_by_the_catch_up(
    tmp_path: Path, catch_up_window_seconds: int | None, escaped: str
) -> None:
    """U2: the first attempt hangs at the stock service and its deadline passes while the
    supervisor is down, until it is older than the sweep window (1 s here) - or older than
    the catch-up window too (2 s). A sweep no longer sees it; the catch-up does, in its
    window or by its scan of the state records beyond it: it retries the order by the
    sweep's rule (U4) and names it in an `order-overdue` alert naming the window it
    escaped; attempt 2 completes and the app hears so."""
    stock = faults_for(FaultRule(FaultKind.HANG, order_id="o-late", operation="reserve", attempt=1))
    settings = {
        **QUICK_RECOVERY,
        "SUPERVISOR_SCHEDULE": "0 0 0 1 1 *",
        "SUPERVISOR_CATCHUP_SCHEDULE": "0 0 0 1 1 *",
        "SUPERVISOR_WINDOW_SECONDS": "1",
    }
    if catch_up_window_seconds is not None:
        settings["SUPERVISOR_CATCHUP_WINDOW_SECONDS"] = str(catch_up_window_seconds)
    async with running_pipeline(
        tmp_path, service_faults={"stock": stock}, settings=settings, virtual_time=True
    ) as e2e:
        host = e2e.pipeline.host
        await e2e.submit(order_body("o-late"), message_id="o-late")
        window = timedelta(seconds=catch_up_window_seconds or 1)

        stuck = await e2e.wait_for_record(
            "o-late",
            lambda r: (
                r.process_state is ProcessState.PROCESSING
                and r.complete_by is not None
                and r.complete_by < bootstrap.now() - window
            ),
            f"attempt 1 expired longer ago than the window of {escaped}",
        )
        await host.invoke("supervise_orders", TimerRequest(past_due=False))
        assert await e2e.record("o-late") == stuck, "the sweep does not see it"
        assert await e2e.peek(ALERTS) == []

        await host.invoke("catch_up_orders", TimerRequest(past_due=False))

        [alert] = await e2e.count_of(ALERTS, 1)
        assert (alert.body["kind"], alert.body["orderId"], alert.body["attempt"]) == (
            "order-overdue",
            "o-late",
            1,
        )
        assert stuck.complete_by is not None
        assert format_utc(stuck.complete_by) in alert.body["reason"]
        assert escaped in alert.body["reason"]
        beyond = "SUPERVISOR_CATCHUP_WINDOW_SECONDS" in alert.body["reason"]
        assert beyond is (catch_up_window_seconds is not None)
        assert "requested retry" in alert.body["reason"]
        replies = await e2e.statuses("o-late", "completed")
        assert replies[-1].body["attempt"] == 2
        record = await e2e.record("o-late")
        assert record is not None
        assert (record.process_state, record.failure_count, record.locked_by) == (
            ProcessState.PROCESSED,
            1,
            "o-late:2",
        )
        assert _effects(e2e, "stock", "o-late") == [(SideEffectKind.RESERVATION, 2)]
