"""Stock, payment and shipping simulators, fault injection on demand (E2, E6-E9, C2): what
each fault kind does to an action, rules that script an order's calls, reproducible draws
from a seed, fault plans per service and per operation, plans refused when invalid or naming
what a service lacks, the presets that make orders compensate, and the stats each service
keeps."""

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from devhost.testing import eventually

from tests.integration.simulators.service_calls import (
    ITEMS,
    TIMEOUT,
    get_json,
    post_action,
    post_compensation,
    post_compensation_by_key,
    put_faults,
)
from tools.simulators.services import (
    PAYMENT,
    PRESET_NAMES,
    SERVICES,
    SHIPPING,
    STOCK,
    FaultKind,
    FaultPlan,
    FaultRule,
    InvalidFaultPlan,
    ServiceDeclaration,
    SimulatedServices,
    preset_plans,
)

by_name = pytest.mark.parametrize("step", [STOCK, PAYMENT, SHIPPING], ids=lambda s: s.name)


def injected(services: SimulatedServices, step: ServiceDeclaration, kind: FaultKind) -> int:
    count: int = services.stats(step.name)["faults_injected"][kind.value]
    return count


@pytest.mark.parametrize(
    ("kind", "status", "error", "message", "performed"),
    [
        (FaultKind.TRANSIENT, 503, "transient", "with the same Idempotency-Key", 0),
        (FaultKind.LOST_RESPONSE, 503, "transient", "with the same Idempotency-Key", 1),
        (FaultKind.LATENCY, 201, None, None, 1),
    ],
    ids=lambda value: getattr(value, "value", None),
)
@by_name
async def test_an_action_fault_is_answered_and_a_retry_with_the_same_key_performs_it_once(
    services: SimulatedServices,
    session: aiohttp.ClientSession,
    step: ServiceDeclaration,
    kind: FaultKind,
    status: int,
    error: str | None,
    message: str | None,
    performed: int,
) -> None:
    services.replace_fault_plan(
        step.name, FaultPlan(rules=(FaultRule(kind, operation=step.action, times=1),))
    )

    faulted = await post_action(session, services.base_url, step, "o-1")
    performed_before_retry = len(services.ledger_entries(step.name, "o-1"))
    retry = await post_action(session, services.base_url, step, "o-1")

    assert (faulted[0], faulted[1].get("error")) == (status, error)
    if message is not None:
        assert message in faulted[1]["message"]
    assert performed_before_retry == performed, "a lost response loses the answer, not the work"
    assert retry[0] == (200 if performed else 201)
    entries = services.ledger_entries(step.name, "o-1")
    assert [e.resource_id for e in entries] == [retry[1][step.id_field]]
    assert services.stats(step.name)["double_side_effects"] == 0
    assert injected(services, step, kind) == 1


async def test_a_transient_fault_tells_the_client_when_to_retry(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    await put_faults(
        session,
        services.url(STOCK.name),
        {"retryAfterSeconds": 2, "rules": [{"kind": "transient", "orderId": "o-1", "times": 1}]},
    )

    async with session.post(
        f"{services.base_url}{STOCK.action_path}",
        json={"orderId": "o-1", "attempt": 1, "items": ITEMS},
        headers={"Idempotency-Key": "o-1:reserve"},
        timeout=TIMEOUT,
    ) as response:
        status, retry_after, body = (
            response.status,
            response.headers.get("Retry-After"),
            await response.json(),
        )

    assert (status, retry_after) == (503, "2")
    assert (body["error"], body["retryAfterSeconds"]) == ("transient", 2)


async def test_a_hung_action_performs_nothing_and_others_are_served_until_shutdown_answers_it(
    session: aiohttp.ClientSession,
) -> None:
    services = SimulatedServices(
        {STOCK.name: FaultPlan(rules=(FaultRule(FaultKind.HANG, order_id="o-hang"),))}
    )
    await services.start()
    try:
        hanging = asyncio.create_task(post_action(session, services.base_url, STOCK, "o-hang"))
        await eventually(
            lambda: injected(services, STOCK, FaultKind.HANG) == 1, "the reservation to hang"
        )
        assert (await post_action(session, services.base_url, STOCK, "o-other"))[0] == 201
        assert not hanging.done()
    finally:
        await asyncio.wait_for(services.stop(), timeout=10)

    status, body = await asyncio.wait_for(hanging, timeout=10)
    assert (status, body["error"]) == (503, "stopping")
    assert [e.order_id for e in services.ledger_entries(STOCK.name)] == ["o-other"]


async def test_rules_fail_the_first_calls_of_an_order_then_let_them_through(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    await put_faults(
        session,
        services.url(STOCK.name),
        {
            "rules": [
                {"kind": "transient", "orderId": "o-1", "times": 2},
                {"kind": "permanent", "orderId": "o-1", "skip": 2, "times": 1},
            ]
        },
    )

    statuses = [(await post_action(session, services.base_url, STOCK, "o-1"))[0] for _ in range(3)]
    statuses += [
        (await post_action(session, services.base_url, STOCK, "o-1", key="o-1:b"))[0]
        for _ in range(2)
    ]

    assert statuses == [503, 503, 422, 201, 200]


async def test_an_action_whose_answer_was_lost_is_replayed_never_declined_c8_e8(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    """The reservation is made but its answer lost; the retry with the same key meets a
    permanent fault, by rule or drawn from a mix: the service replays what it did instead of
    declining it, so a decline (E8) always means nothing was done for the key. Another key
    of the same order is still declined."""
    await put_faults(
        session,
        services.url(STOCK.name),
        {
            "rules": [
                {"kind": "lost-response", "orderId": "o-1", "times": 1},
                {"kind": "permanent", "orderId": "o-1", "skip": 1, "times": 1},
            ],
            "probabilities": {"permanent": 1.0},
        },
    )

    lost, retried, drawn = [
        (await post_action(session, services.base_url, STOCK, "o-1"))[0] for _ in range(3)
    ]
    other = await post_action(session, services.base_url, STOCK, "o-1", key="o-1:other")

    assert (lost, retried, drawn) == (503, 200, 200)
    assert (other[0], other[1]["error"]) == (422, "permanent")
    assert len(services.ledger_entries(STOCK.name, "o-1")) == 1
    assert injected(services, STOCK, FaultKind.PERMANENT) == 1, "only the decline delivered"


@by_name
async def test_a_declined_request_delivered_again_is_declined_again_and_performs_nothing_e8_e7(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    """The same request gets the same answer: once the service declined an action (a
    permanent fault), that request delivered again (its key and attempt), with no fault
    planned, is declined again and performs nothing, so an order the decline ended in Error
    has nothing left at the service. A newer attempt (an operator's resubmit) gets a fresh
    answer, after which the declined attempt is stale; the key stays the order's."""
    services.replace_fault_plan(
        step.name,
        FaultPlan(rules=(FaultRule(FaultKind.PERMANENT, operation=step.action, times=1),)),
    )

    declined = await post_action(session, services.base_url, step, "o-1")
    again = [await post_action(session, services.base_url, step, "o-1") for _ in range(2)]
    other_order = await post_action(
        session, services.base_url, step, "o-2", key=f"o-1:{step.action}"
    )
    performed_before_resubmit = len(services.ledger_entries(step.name))
    resubmitted = await post_action(session, services.base_url, step, "o-1", attempt=2)
    stale = await post_action(session, services.base_url, step, "o-1", attempt=1)

    assert (declined[0], declined[1]["error"]) == (422, "permanent")
    assert again == [declined, declined]
    assert (other_order[0], other_order[1]["error"]) == (422, "idempotency-key-reuse")
    assert performed_before_resubmit == 0
    assert (resubmitted[0], resubmitted[1]["attempt"]) == (201, 2)
    assert (stale[0], stale[1]["error"], stale[1]["currentAttempt"]) == (409, "stale-attempt", 2)
    assert len(services.ledger_entries(step.name)) == 1
    stats = services.stats(step.name)
    assert (stats["declines"], stats["declines_replayed"]) == (1, 2)
    assert injected(services, step, FaultKind.PERMANENT) == 1


async def test_a_declined_request_stays_declined_after_a_restart_on_the_same_ledger_file_e8_e7(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    """A decline is journaled like every ledger fact: the services restarted on the same
    file decline the request again, perform nothing, and a compensation by its key (a
    cancel's, under a newer attempt) finds nothing to undo."""
    ledger = tmp_path / "ledger.jsonl"
    before = SimulatedServices(
        {STOCK.name: FaultPlan(rules=(FaultRule(FaultKind.PERMANENT, times=1),))},
        ledger_path=ledger,
    )
    await before.start()
    try:
        declined = await post_action(session, before.base_url, STOCK, "o-1")
    finally:
        await before.stop()

    after = SimulatedServices(ledger_path=ledger)
    await after.start()
    try:
        again = await post_action(session, after.base_url, STOCK, "o-1")
        undo = await post_compensation_by_key(session, after.base_url, STOCK, "o-1", 2)
        entries = after.ledger_entries(STOCK.name)
        stats = after.stats(STOCK.name)
    finally:
        await after.stop()

    assert (declined[0], declined[1]["error"]) == (422, "permanent")
    assert again == declined
    assert (undo[0], undo[1]["undone"], undo[1]["status"]) == (200, False, "nothing-to-undo")
    assert entries == []
    assert (stats["declines"], stats["declines_replayed"]) == (1, 1)
    assert stats["faults_injected"]["permanent"] == 0


async def test_a_rule_for_every_call_of_matching_orders_leaves_other_orders_alone(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    await put_faults(
        session, services.url(STOCK.name), {"rules": [{"kind": "permanent", "orderId": "bad-*"}]}
    )

    bad = [
        (await post_action(session, services.base_url, STOCK, f"bad-{n % 2}"))[0] for n in range(4)
    ]
    good = (await post_action(session, services.base_url, STOCK, "good-1"))[0]

    assert (bad, good) == ([422] * 4, 201)


async def test_a_rule_can_fault_one_attempt_of_an_order_only(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    services.replace_fault_plan(
        STOCK.name, FaultPlan(rules=(FaultRule(FaultKind.TRANSIENT, order_id="o-1", attempt=1),))
    )

    first_attempt = [
        (await post_action(session, services.base_url, STOCK, "o-1", attempt=1))[0]
        for _ in range(2)
    ]
    second_attempt = await post_action(session, services.base_url, STOCK, "o-1", attempt=2)

    assert (first_attempt, second_attempt[0]) == ([503, 503], 201)


DETERMINISM_PLAN = FaultPlan(
    probabilities={
        FaultKind.TRANSIENT: 0.3,
        FaultKind.PERMANENT: 0.1,
        FaultKind.LOST_RESPONSE: 0.2,
    }
)
ORDERS = [f"o-{n}" for n in range(8)]
CALLS_PER_ORDER = 5


async def outcomes(
    session: aiohttp.ClientSession, seed: int, schedule: Sequence[str]
) -> dict[str, list[int]]:
    """Send ``schedule`` (one order id per reservation) in sequence to services started with
    ``seed``; the statuses seen per order."""
    services = SimulatedServices({STOCK.name: DETERMINISM_PLAN}, seed=seed)
    await services.start()
    seen: dict[str, list[int]] = {order_id: [] for order_id in ORDERS}
    try:
        for order_id in schedule:
            seen[order_id].append(
                (await post_action(session, services.base_url, STOCK, order_id))[0]
            )
    finally:
        await services.stop()
    return seen


async def test_the_same_seed_and_requests_give_the_same_faults(
    session: aiohttp.ClientSession,
) -> None:
    by_order = [order_id for order_id in ORDERS for _ in range(CALLS_PER_ORDER)]
    round_robin = [order_id for _ in range(CALLS_PER_ORDER) for order_id in ORDERS]

    first = await outcomes(session, 11, by_order)
    repeated = await outcomes(session, 11, by_order)
    interleaved = await outcomes(session, 11, round_robin)
    other_seed = await outcomes(session, 12, by_order)

    assert repeated == first
    assert interleaved == first, "faults per order do not depend on other orders' traffic"
    assert other_seed != first
    statuses = {status for per_order in first.values() for status in per_order}
    assert {503, 422, 201} <= statuses, "the mix injected faults and let calls through"


async def test_each_service_has_a_fault_plan_of_its_own(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    status, plan = await put_faults(
        session, services.url(PAYMENT.name), {"probabilities": {"transient": 1.0}}
    )
    assert (status, plan["probabilities"]) == (200, {"transient": 1.0})

    statuses = {
        step.name: (await post_action(session, services.base_url, step, "o-1"))[0]
        for step in SERVICES.values()
    }

    assert statuses == {"stock": 201, "payment": 503, "shipping": 201}
    assert (await get_json(session, f"{services.url(STOCK.name)}/faults"))["probabilities"] == {}
    assert {name: services.stats(name)["faults_injected"]["transient"] for name in SERVICES} == {
        "stock": 0,
        "payment": 1,
        "shipping": 0,
    }

    await put_faults(session, services.url(PAYMENT.name), {"preset": "none"})
    healed = await post_action(session, services.base_url, PAYMENT, "o-1")

    assert healed[0] == 201
    assert (await get_json(session, f"{services.url(PAYMENT.name)}/faults"))["probabilities"] == {}


async def test_a_rule_selects_the_action_or_the_compensation_by_operation_name(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    await put_faults(
        session,
        services.url(STOCK.name),
        {"rules": [{"kind": "permanent", "operation": "release"}]},
    )

    reserved = await post_action(session, services.base_url, STOCK, "o-1")
    released = await post_compensation(
        session, services.base_url, STOCK, reserved[1]["reservationId"], 1
    )

    assert (reserved[0], released[0], released[1]["error"]) == (201, 422, "permanent")
    assert "cannot be released" in released[1]["message"]


async def test_an_operation_mix_replaces_the_plan_mix_for_that_operation(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    plan = {"probabilities": {}, "operationProbabilities": {"refund": {"transient": 1.0}}}
    status, served = await put_faults(session, services.url(PAYMENT.name), plan)
    assert (status, served["operationProbabilities"]) == (200, {"refund": {"transient": 1.0}})

    status, charged = await post_action(session, services.base_url, PAYMENT, "o-1")
    refunds = [
        (await post_compensation(session, services.base_url, PAYMENT, charged["paymentId"], 1))[0]
        for _ in range(3)
    ]

    assert (status, refunds) == (201, [503, 503, 503])


@pytest.mark.parametrize(
    ("service", "plan", "complaint"),
    [
        (STOCK, {"rules": [{"kind": "transient", "operation": "charge"}]}, "charge"),
        (PAYMENT, {"operationProbabilities": {"ship": {"transient": 0.1}}}, "ship"),
        (STOCK, {"probabilities": {"dispatched": 0.1}}, "dispatched"),
        (PAYMENT, {"rules": [{"kind": "dispatched"}]}, "dispatched"),
        (PAYMENT, {"dispatchAfterSeconds": 5}, "dispatchAfterSeconds"),
        (SHIPPING, {"dispatchAfterSeconds": -1}, "dispatchAfterSeconds"),
        (SHIPPING, {"operationProbabilities": {"cancel": {"hang": 0.6, "dispatched": 0.6}}}, "1"),
        (STOCK, {"preset": "gentle"}, "gentle"),
        (STOCK, {"probabilities": {"transient": 0.7, "hang": 0.5}}, "add up"),
        (STOCK, {"probabilities": {"meteor": 0.1}}, "meteor"),
        (STOCK, {"rules": [{"kind": "transient", "times": 0}]}, "times"),
        (STOCK, {"rules": [{"kind": "flood"}]}, "kind"),
        (STOCK, {"latencySeconds": [2, 1]}, "latencySeconds"),
        (STOCK, {"retries": 3}, "retries"),
    ],
    ids=[
        "other-service-operation",
        "other-service-operation-mix",
        "dispatch-without-dispatch-rule",
        "dispatched-rule-without-dispatch-rule",
        "dispatch-time-without-dispatch-rule",
        "negative-dispatch-time",
        "operation-mix-above-one",
        "unknown-preset",
        "mix-above-one",
        "unknown-kind",
        "rule-times-zero",
        "unknown-rule-kind",
        "latency-range-reversed",
        "unknown-key",
    ],
)
async def test_a_plan_invalid_or_naming_what_the_service_lacks_is_refused_and_the_old_one_kept(
    services: SimulatedServices,
    session: aiohttp.ClientSession,
    service: ServiceDeclaration,
    plan: dict[str, Any],
    complaint: str,
) -> None:
    status, body = await put_faults(session, services.url(service.name), plan)

    assert (status, body["error"]) == (400, "invalid-fault-plan")
    assert complaint in body["message"]
    assert (await post_action(session, services.base_url, service, "o-1"))[0] == 201


def test_a_plan_that_does_not_fit_its_service_is_refused_in_process() -> None:
    with pytest.raises(InvalidFaultPlan, match="dispatched"):
        SimulatedServices({STOCK.name: FaultPlan(rules=(FaultRule(FaultKind.DISPATCHED),))})
    with pytest.raises(ValueError, match="teleport"):
        SimulatedServices({"teleport": FaultPlan()})


@pytest.mark.parametrize("preset", PRESET_NAMES)
async def test_every_preset_loads_for_every_service(
    session: aiohttp.ClientSession, preset: str
) -> None:
    plans = preset_plans(preset)
    services = SimulatedServices(plans, seed=1)
    await services.start()
    try:
        served = {
            name: FaultPlan.from_json(await get_json(session, f"{services.url(name)}/faults"), name)
            for name in SERVICES
        }
        status, _ = await put_faults(session, services.url(PAYMENT.name), {"preset": preset})
    finally:
        await services.stop()

    assert served == plans
    assert status == 200


def test_the_compensation_presets_decline_payments_and_dispatch_shipments() -> None:
    for preset in ("declines", "compensation-faults"):
        plans = preset_plans(preset)
        assert plans[PAYMENT.name].mix_for("charge")[FaultKind.PERMANENT] > 0
        assert plans[SHIPPING.name].mix_for("cancel")[FaultKind.DISPATCHED] > 0
    failing = preset_plans("compensation-faults")
    for service in (STOCK, PAYMENT, SHIPPING):
        mix = failing[service.name].mix_for(service.compensation)
        assert mix[FaultKind.PERMANENT] > 0
        assert mix[FaultKind.HANG] > 0


async def test_the_declines_preset_makes_orders_compensate(
    session: aiohttp.ClientSession,
) -> None:
    services = SimulatedServices(preset_plans("declines"), seed=4)
    await services.start()
    orders = [f"o-{n}" for n in range(60)]
    try:
        charges = [
            (await post_action(session, services.base_url, PAYMENT, order))[1] for order in orders
        ]
        shipment_ids = []
        for order in orders:
            status, body = await post_action(session, services.base_url, SHIPPING, order)
            if status == 201:
                shipment_ids.append(body["shipmentId"])
        cancels = [
            (await post_compensation(session, services.base_url, SHIPPING, shipment_id, 1))[1]
            for shipment_id in shipment_ids
        ]
    finally:
        await services.stop()

    declined = [c for c in charges if c.get("error") == "permanent"]
    dispatched = [c for c in cancels if c.get("error") == "already-dispatched"]
    assert 0 < len(declined) < len(orders) // 2
    assert 0 < len(dispatched) < len(cancels)
    assert any(c.get("status") == "cancelled" for c in cancels)


async def test_stats_of_a_step_service_count_its_side_effects_refusals_and_faults(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    await put_faults(
        session,
        services.url(SHIPPING.name),
        {
            "rules": [
                {"kind": "transient", "orderId": "o-1", "operation": "ship", "times": 1},
                {"kind": "dispatched", "orderId": "o-2", "operation": "cancel"},
                {
                    "kind": "latency",
                    "orderId": "o-3",
                    "operation": "cancel",
                    "times": 1,
                    "delaySeconds": 0.01,
                },
            ]
        },
    )
    before = time.time()
    shipped = {}
    for order in ("o-1", "o-1", "o-2", "o-3"):
        status, body = await post_action(session, services.base_url, SHIPPING, order)
        if status == 201:
            shipped[order] = body["shipmentId"]
    cancels = [
        (await post_compensation(session, services.base_url, SHIPPING, shipped[order], attempt))[0]
        for order, attempt in (("o-2", 1), ("o-3", 2), ("o-3", 2))
    ]
    stale = await post_action(session, services.base_url, SHIPPING, "o-3", key="late")
    after = time.time()
    stats = await get_json(session, f"{services.url(SHIPPING.name)}/stats")
    times = stats.pop("faults_injected_times")

    assert cancels == [422, 201, 200]
    assert stale[0] == 409
    assert sorted((t["kind"], t["count"]) for t in times) == [
        ("dispatched", 1),
        ("latency", 1),
        ("transient", 1),
    ]
    assert all(before <= t["at"] <= after for t in times), times
    assert stats == {
        "requests": 8,
        "shipments": 3,
        "cancellations": 1,
        "side_effects_per_order": {
            "o-1": {"shipment": 1, "cancellation": 0},
            "o-2": {"shipment": 1, "cancellation": 0},
            "o-3": {"shipment": 1, "cancellation": 1},
        },
        "double_side_effects": 0,
        "stale_writes_refused": 1,
        "idempotency_key_reuse_refused": 0,
        "replays": 1,
        "tombstones": 0,
        "actions_refused_after_undo": 0,
        "declines": 0,
        "declines_replayed": 0,
        "dispatched": 1,
        "cancellations_refused": 1,
        "faults_injected": {
            "transient": 1,
            "latency": 1,
            "hang": 0,
            "permanent": 0,
            "lost-response": 0,
            "dispatched": 1,
        },
        "faults_injected_by_operation": {
            "ship": {
                "transient": 1,
                "latency": 0,
                "hang": 0,
                "permanent": 0,
                "lost-response": 0,
                "dispatched": 0,
            },
            "cancel": {
                "transient": 0,
                "latency": 1,
                "hang": 0,
                "permanent": 0,
                "lost-response": 0,
                "dispatched": 1,
            },
        },
        "latency_delays": {"cancel": [0.01]},
        "requests_per_order": {"o-1": 2, "o-2": 2, "o-3": 4},
    }
    assert services.stats(STOCK.name)["faults_injected"].keys() == {
        "transient",
        "latency",
        "hang",
        "permanent",
        "lost-response",
    }
