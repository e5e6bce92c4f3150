"""Compensation of step-workflow orders through the real pipeline (C1, C2, C3, U4, E7).

A step that cannot complete undoes what the order did, newest first, each undo through its
step's own agent (C1): the step in doubt by its idempotency key, then the completed steps by
the references in the compensation log. The order ends Compensated, or CompensationFailed with
an operator alert when an undo cannot be done; a compensation that stalls is resumed by the
supervisor where it stopped (C2). The simulated services' fault rules target one order, so
each test shows one way an order compensates; deadlines are short so every recovery happens
within seconds. Every test also reads the ledgers for what no one may ever see: a side effect
started after the order began compensating.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest
from devhost.testing import eventually

import bootstrap
from domain.agent_messages import AgentRequest
from domain.records import InstanceId, ProcessState, StateRecord, StepState
from domain.workflow import declaration
from orchestrators.order_workflow import BEGIN_STEP, BEGIN_UNDO
from order_agents.call_policy import request_call
from order_agents.remote_services import STEP_SERVICES as REMOTE_SERVICES
from order_agents.service_client import RemoteResult, ServiceClient, Superseded
from tests.e2e.e2e_helpers import (
    ALERTS,
    E2E,
    QUICK_RECOVERY,
    REPLIES,
    compensation_began_at,
    order_body,
    running_pipeline,
    scheduled_activities,
    side_effects_against_compensation,
)
from tools.simulators.services import FaultKind, FaultPlan, FaultRule, SideEffectKind

pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")

# Stalled compensations are recovered as expired attempts are: an undo has a step's 10 s.
QUICK = {**QUICK_RECOVERY, "COMPENSATION_TIMEOUT_SECONDS": "10"}

LATE_CALL_TIMEOUT_SECONDS = 10.0

# How an attempt ends when its step outlives the deadline: the timer first, or the agent's
# "gave up" answer first (E6); either way it writes nothing.
ENDED_WITHOUT_WRITING = {"timed-out", "gave-up"}


def every_time(kind: FaultKind, order_id: str, operation: str) -> FaultPlan:
    return FaultPlan(rules=(FaultRule(kind, order_id=order_id, operation=operation),))


def steps_of(record: StateRecord) -> list[tuple[str, StepState, str | None]]:
    return [(step.name, step.state, step.reference) for step in record.steps]


def logged(record: StateRecord) -> list[tuple[str, str | None]]:
    return [(entry.step, entry.reference) for entry in record.compensation_log]


def effects(e2e: E2E, service: str, order_id: str) -> list[tuple[SideEffectKind, int]]:
    """The side effects `service` performed for the order, in order, with their attempt."""
    return [(e.kind, e.attempt) for e in e2e.pipeline.services.ledger_entries(service, order_id)]


def only_entry_id(e2e: E2E, service: str, order_id: str, kind: SideEffectKind) -> str:
    [entry] = [e for e in e2e.pipeline.services.ledger_entries(service, order_id) if e.kind is kind]
    return entry.resource_id


def undone_keys(e2e: E2E, service: str, order_id: str) -> list[tuple[str, int]]:
    return [
        (t.idempotency_key, t.attempt) for t in e2e.pipeline.services.tombstones(service, order_id)
    ]


async def test_c1_c2_a_declined_payment_releases_the_stock_and_ends_compensated(
    tmp_path: Path, store_settings: dict[str, str]
) -> None:
    """C1, C2: the payment service declines the charge for good, so the order compensates:
    the declined charge is undone by its idempotency key (nothing to undo: the key is closed
    for good), then the stock reserved by the step before is released. The app hears
    received, in-progress reserve-stock, compensated; every service's net effect is zero; the
    compensation log holds the reservation's reference only (C3); no operator is alerted."""
    order = "o-declined"
    payment = every_time(FaultKind.PERMANENT, order, "charge")
    async with running_pipeline(
        tmp_path, service_faults={"payment": payment}, settings=store_settings, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body(order), message_id=order)

        replies = await e2e.statuses(order, "compensated")

        assert [(m.body["status"], m.body["step"]) for m in replies] == [
            ("received", None),
            ("in-progress", "reserve-stock"),
            ("compensated", None),
        ]
        assert [m.message_id for m in replies[1:]] == [
            f"{order}:in-progress:reserve-stock",
            f"{order}:compensated:1",
        ]
        record = await e2e.record(order)
        assert record is not None
        assert (record.process_state, record.failure_count, record.attempt) == (
            ProcessState.COMPENSATED,
            0,
            1,
        )
        assert record.last_error is not None
        assert "cannot be charged" in record.last_error
        reservation = only_entry_id(e2e, "stock", order, SideEffectKind.RESERVATION)
        assert steps_of(record) == [
            ("reserve-stock", StepState.COMPENSATED, reservation),
            ("charge-payment", StepState.COMPENSATED, None),
            ("ship-order", StepState.NOT_STARTED, None),
        ]
        assert logged(record) == [("reserve-stock", reservation)]
        # Net effect per service: nothing.
        assert effects(e2e, "stock", order) == [
            (SideEffectKind.RESERVATION, 1),
            (SideEffectKind.RELEASE, 1),
        ]
        assert effects(e2e, "payment", order) == []
        assert undone_keys(e2e, "payment", order) == [(f"{order}:charge-payment", 1)]
        assert e2e.pipeline.services.stats("shipping")["requests"] == 0
        # Newest first: the charge in doubt was undone before the reservation was released.
        [charge_undone] = e2e.pipeline.services.tombstones("payment", order)
        [_, released] = e2e.pipeline.services.ledger_entries("stock", order)
        assert charge_undone.at <= released.at
        began_at = await compensation_began_at(e2e, order)
        assert side_effects_against_compensation(e2e.pipeline.services, order, began_at) == []
        assert await e2e.pending(ALERTS) == [], "a compensated order needs no operator"
        assert bootstrap.services().settings.state_store == store_settings["STATE_STORE"]


async def test_c2_an_undo_that_cannot_be_done_ends_compensation_failed_and_stops_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """C2: the order ships before it is charged (ORDER_STEPS), the shipment is dispatched at
    once, and the charge is declined. Compensation undoes the charge in doubt by its key,
    then meets the dispatched shipment, whose cancel is refused for good: CompensationFailed,
    a `compensation-failed` status and alert naming the step and why. The workflow stops at
    the failing undo: the stock reservation before it is not released, and the record says
    so (reserve-stock still Completed, in the log); the supervisor leaves the order to the
    operator."""
    caplog.set_level(logging.INFO, logger="app.supervisor")
    order = "o-dispatched"
    settings = {**QUICK, "ORDER_STEPS": "reserve-stock,ship-order,charge-payment"}
    faults = {
        "shipping": every_time(FaultKind.DISPATCHED, order, "ship"),
        "payment": every_time(FaultKind.PERMANENT, order, "charge"),
    }
    async with running_pipeline(
        tmp_path, service_faults=faults, settings=settings, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body(order), message_id=order)

        replies = await e2e.statuses(order, "compensation-failed")

        assert [(m.body["status"], m.body["step"]) for m in replies] == [
            ("received", None),
            ("in-progress", "reserve-stock"),
            ("in-progress", "ship-order"),
            ("compensation-failed", None),
        ]
        why = replies[-1].body["reason"]
        assert "ship-order" in why
        assert "already-dispatched" in why
        [alert] = await e2e.count_of(ALERTS, 1)
        assert (alert.body["kind"], alert.body["orderId"], alert.body["attempt"]) == (
            "compensation-failed",
            order,
            1,
        )
        reservation_id = only_entry_id(e2e, "stock", order, SideEffectKind.RESERVATION)
        assert alert.body["reason"].startswith(f"{why}; left to undo: ship-order (shp-")
        assert alert.body["reason"].endswith(f"reserve-stock ({reservation_id})")
        record = await e2e.record(order)
        assert record is not None
        assert record.process_state is ProcessState.COMPENSATION_FAILED
        assert (record.current_step, record.complete_by) == ("ship-order", None)
        reservation = only_entry_id(e2e, "stock", order, SideEffectKind.RESERVATION)
        shipment = only_entry_id(e2e, "shipping", order, SideEffectKind.SHIPMENT)
        assert steps_of(record) == [
            ("reserve-stock", StepState.COMPLETED, reservation),
            ("ship-order", StepState.COMPENSATION_FAILED, shipment),
            ("charge-payment", StepState.COMPENSATED, None),
        ]
        assert logged(record) == [("reserve-stock", reservation), ("ship-order", shipment)]
        # What the workflow did, undo by undo: the charge's key closed, the cancel refused,
        # and nothing asked of the stock service after its reservation.
        assert undone_keys(e2e, "payment", order) == [(f"{order}:charge-payment", 1)]
        assert effects(e2e, "payment", order) == []
        shipping = e2e.pipeline.services.stats("shipping")
        assert (shipping["dispatched"], shipping["cancellations_refused"]) == (1, 1)
        assert effects(e2e, "shipping", order) == [(SideEffectKind.SHIPMENT, 1)]
        assert effects(e2e, "stock", order) == [(SideEffectKind.RESERVATION, 1)]
        assert e2e.pipeline.services.stats("stock")["requests"] == 1
        began_at = await compensation_began_at(e2e, order)
        assert side_effects_against_compensation(e2e.pipeline.services, order, began_at) == []

        sweeps_before = _sweeps(caplog)
        await eventually(lambda: _sweeps(caplog) >= sweeps_before + 2, "two more sweeps")
        after = await e2e.record(order)
        assert after is not None
        assert after.etag == record.etag, "the supervisor leaves CompensationFailed alone"
        assert await e2e.instance(f"{order}:2") is None


async def test_u4_c1_an_attempt_that_keeps_timing_out_is_given_up_and_compensated(
    tmp_path: Path,
) -> None:
    """U4, C1, C10: the payment service never answers for this order, so every attempt's
    charge outlives its deadline. The supervisor retries twice - each new attempt resumes at
    charge-payment and never asks for stock again - and at MAX_FAILURES gives up and requests
    compensation: instance 4 undoes the charge in doubt by its idempotency key and releases
    the stock. The order ends Compensated with a `compensated` status and no alert."""
    order = "o-no-answer"
    payment = every_time(FaultKind.HANG, order, "charge")
    async with running_pipeline(
        tmp_path, service_faults={"payment": payment}, settings=QUICK, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body(order), message_id=order)

        replies = await e2e.statuses(order, "compensated")

        assert [(m.body["status"], m.body["step"], m.body["attempt"]) for m in replies] == [
            ("received", None, None),
            ("in-progress", "reserve-stock", 1),
            ("compensated", None, 4),
        ]
        record = await e2e.record(order)
        assert record is not None
        assert (record.process_state, record.failure_count, record.attempt) == (
            ProcessState.COMPENSATED,
            3,
            4,
        )
        assert record.last_error is not None
        assert "MAX_FAILURES=3" in record.last_error
        reservation = only_entry_id(e2e, "stock", order, SideEffectKind.RESERVATION)
        assert steps_of(record) == [
            ("reserve-stock", StepState.COMPENSATED, reservation),
            ("charge-payment", StepState.COMPENSATED, None),
            ("ship-order", StepState.NOT_STARTED, None),
        ]
        for attempt in (1, 2, 3):
            instance = await e2e.finished_instance(f"{order}:{attempt}")
            assert instance.output["outcome"] in ENDED_WITHOUT_WRITING
            assert instance.output["step"] == "charge-payment"
            assert instance.input["resume_at"] == (0 if attempt == 1 else 1)
        compensation = await e2e.finished_instance(f"{order}:4")
        assert compensation.output == {"outcome": "compensated"}
        assert [u["name"] for u in compensation.input["undo"]] == [
            "charge-payment",
            "reserve-stock",
        ]
        assert BEGIN_STEP not in scheduled_activities(compensation)
        assert await e2e.instance(f"{order}:5") is None
        # C10: one reservation, by attempt 1, released by the compensation.
        assert effects(e2e, "stock", order) == [
            (SideEffectKind.RESERVATION, 1),
            (SideEffectKind.RELEASE, 4),
        ]
        assert e2e.pipeline.services.stats("stock")["requests"] == 2
        payment_stats = e2e.pipeline.services.stats("payment")
        assert payment_stats["faults_injected"]["hang"] >= 3, "each attempt asked for the charge"
        assert effects(e2e, "payment", order) == []
        assert undone_keys(e2e, "payment", order) == [(f"{order}:charge-payment", 4)]
        began_at = await compensation_began_at(e2e, order)
        assert side_effects_against_compensation(e2e.pipeline.services, order, began_at) == []
        assert await e2e.pending(ALERTS) == []


async def test_u4_c1_e7_a_first_step_in_doubt_is_undone_by_key_before_the_order_ends_in_error(
    tmp_path: Path, store_settings: dict[str, str]
) -> None:
    """U4, C1, E7: two orders whose first step never gets a usable answer. For `o-lost` the
    stock service reserves, but every answer is lost; for `o-late` every call hangs, and
    the expired attempt's call only arrives after the order gave up. At MAX_FAILURES the
    supervisor gives up on each with nothing completed but the reservation in doubt: attempt
    4 undoes it by its idempotency key - releasing o-lost's reservation, closing o-late's key
    for good - and only then is the order in Error, with a `failed` status and an
    `order-error` alert under attempt 4. The late call of o-late's expired attempt is
    refused and reserves nothing: each order's net effect at the stock service is zero."""
    faults = {
        "stock": FaultPlan(
            rules=(
                FaultRule(FaultKind.LOST_RESPONSE, order_id="o-lost", operation="reserve"),
                FaultRule(FaultKind.HANG, order_id="o-late", operation="reserve"),
            )
        )
    }
    orders = ("o-lost", "o-late")
    settings = {**QUICK, **store_settings}
    async with running_pipeline(
        tmp_path, service_faults=faults, settings=settings, virtual_time=True
    ) as e2e:
        for order in orders:
            await e2e.submit(order_body(order), message_id=order)

        replies = await e2e.receive(
            REPLIES,
            until=lambda taken: (
                {m.body["orderId"] for m in taken if m.body["status"] == "failed"} == set(orders)
            ),
            what="the failed status of both orders",
        )

        alerts = await e2e.count_of(ALERTS, 2)
        in_error = {}
        for order in orders:
            trail = [
                (m.body["status"], m.body["attempt"]) for m in replies if m.body["orderId"] == order
            ]
            assert trail == [("received", None), ("failed", 4)], order
            [alert] = [a.body for a in alerts if a.body["orderId"] == order]
            assert (alert["kind"], alert["attempt"]) == ("order-error", 4)
            assert "MAX_FAILURES=3" in alert["reason"]
            assert alert["reason"].endswith("nothing is left to undo")
            record = await e2e.record(order)
            assert record is not None
            assert (record.process_state, record.failure_count, record.attempt) == (
                ProcessState.ERROR,
                3,
                4,
            )
            assert steps_of(record)[0] == ("reserve-stock", StepState.COMPENSATED, None)
            assert record.compensation_log == ()
            in_error[order] = record
            for attempt in (1, 2, 3):
                expired = await e2e.finished_instance(f"{order}:{attempt}")
                assert expired.output["outcome"] in ENDED_WITHOUT_WRITING
            compensation = await e2e.finished_instance(f"{order}:4")
            assert compensation.output == {"outcome": "failed"}
            assert compensation.input["undo"] == [
                {"index": 0, "name": "reserve-stock", "reference": None}
            ]
            assert await e2e.instance(f"{order}:5") is None
            began_at = await compensation_began_at(e2e, order)
            assert side_effects_against_compensation(e2e.pipeline.services, order, began_at) == []

        # o-lost: reserved by attempt 1, released by its key by attempt 4.
        assert effects(e2e, "stock", "o-lost") == [
            (SideEffectKind.RESERVATION, 1),
            (SideEffectKind.RELEASE, 4),
        ]
        assert undone_keys(e2e, "stock", "o-lost") == []
        # o-late: nothing was reserved, and the key is closed for good.
        assert effects(e2e, "stock", "o-late") == []
        assert undone_keys(e2e, "stock", "o-late") == [("o-late:reserve-stock", 4)]

        # The service lets calls through again: the one held in flight arrives now.
        e2e.pipeline.services.replace_fault_plan("stock", FaultPlan())
        late = await late_call(e2e, InstanceId("o-late", 3), "reserve-stock")

        assert isinstance(late, Superseded), late
        assert effects(e2e, "stock", "o-late") == [], "the late call reserved after Error"
        assert e2e.pipeline.services.stats("stock")["actions_refused_after_undo"] == 1
        assert await e2e.record("o-late") == in_error["o-late"]
        assert e2e.pipeline.services.stats("payment")["requests"] == 0
        assert bootstrap.services().settings.state_store == store_settings["STATE_STORE"]


async def late_call(e2e: E2E, instance: InstanceId, step: str) -> RemoteResult:
    """The call of `step` an agent of `instance` started before its deadline and that reaches
    the service only now (E7 lets work in flight continue): the same request, idempotency key
    and fencing token as the attempt's own tries."""
    order = await e2e.stored_order(instance.order_id)
    assert order is not None
    request = AgentRequest(
        instance_id=str(instance),
        step=step,
        order=order,
        deadline=bootstrap.now() + timedelta(minutes=5),
    )
    agent = declaration(step).agent
    async with aiohttp.ClientSession() as session:
        client = ServiceClient(REMOTE_SERVICES[agent], e2e.pipeline.services.url(agent), session)
        return await request_call(client, request)(LATE_CALL_TIMEOUT_SECONDS)


async def test_c2_a_stalled_compensation_is_resumed_where_it_stopped(tmp_path: Path) -> None:
    """C2, U4: the charge is declined and the order compensates, but the stock service hangs
    on the first release, so the compensation outlives its deadline. The supervisor finds it
    stalled and starts attempt 2, which resumes at the release - the charge, undone already,
    is not undone again - and the order ends Compensated."""
    order = "o-stalled"
    faults = {
        "payment": every_time(FaultKind.PERMANENT, order, "charge"),
        "stock": FaultPlan(
            rules=(FaultRule(FaultKind.HANG, order_id=order, operation="release", times=1),)
        ),
    }
    async with running_pipeline(
        tmp_path, service_faults=faults, settings=QUICK, virtual_time=True
    ) as e2e:
        await e2e.submit(order_body(order), message_id=order)

        replies = await e2e.statuses(order, "compensated")

        assert [(m.body["status"], m.body["step"], m.body["attempt"]) for m in replies] == [
            ("received", None, None),
            ("in-progress", "reserve-stock", 1),
            ("compensated", None, 2),
        ]
        stalled = await e2e.finished_instance(f"{order}:1")
        assert stalled.output == {"outcome": "compensation-stalled", "step": "reserve-stock"}
        resumed = await e2e.finished_instance(f"{order}:2")
        assert resumed.output == {"outcome": "compensated"}
        reservation = only_entry_id(e2e, "stock", order, SideEffectKind.RESERVATION)
        assert resumed.input["undo"] == [
            {"index": 0, "name": "reserve-stock", "reference": reservation}
        ]
        assert scheduled_activities(resumed).count(BEGIN_UNDO) == 1
        record = await e2e.record(order)
        assert record is not None
        assert (
            record.process_state,
            record.compensation_failures,
            record.failure_count,
            record.attempt,
        ) == (ProcessState.COMPENSATED, 1, 0, 2)
        assert steps_of(record) == [
            ("reserve-stock", StepState.COMPENSATED, reservation),
            ("charge-payment", StepState.COMPENSATED, None),
            ("ship-order", StepState.NOT_STARTED, None),
        ]
        # The release hung once, then attempt 2 performed it; the charge's key was closed once.
        stock = e2e.pipeline.services.stats("stock")
        assert (stock["faults_injected"]["hang"], stock["requests"]) == (1, 3)
        assert effects(e2e, "stock", order) == [
            (SideEffectKind.RESERVATION, 1),
            (SideEffectKind.RELEASE, 2),
        ]
        assert undone_keys(e2e, "payment", order) == [(f"{order}:charge-payment", 1)]
        assert e2e.pipeline.services.stats("payment")["requests"] == 2, "charge, undo by key"
        began_at = await compensation_began_at(e2e, order)
        assert side_effects_against_compensation(e2e.pipeline.services, order, began_at) == []
        assert await e2e.pending(ALERTS) == []


def _sweeps(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for r in caplog.records if r.name == "app.supervisor" and "sweep" in r.message)
