"""Stock, payment and shipping simulators, compensations (C1, C2): performed once, replayed,
fenced, refused for a dispatched shipment, and failing or stalling under faults; and the
evidence an order's net effect is read from."""

import asyncio
import datetime as dt
from collections import Counter

import aiohttp
import pytest
from devhost.testing import eventually

from tests.integration.simulators.service_calls import (
    get_json,
    post_action,
    post_compensation,
    put_faults,
)
from tools.simulators.services import (
    PAYMENT,
    SHIPPING,
    STOCK,
    FaultKind,
    FaultPlan,
    FaultRule,
    Role,
    ServiceDeclaration,
    SimulatedServices,
)

by_name = pytest.mark.parametrize("step", [STOCK, PAYMENT, SHIPPING], ids=lambda s: s.name)


async def performed_id(
    session: aiohttp.ClientSession,
    services: SimulatedServices,
    step: ServiceDeclaration,
    order: str,
) -> str:
    status, body = await post_action(session, services.base_url, step, order)
    assert status == 201, body
    resource_id: str = body[step.id_field]
    return resource_id


def compensations(services: SimulatedServices, step: ServiceDeclaration) -> int:
    count: int = services.stats(step.name)[f"{step.compensation_effect}s"]
    return count


@by_name
async def test_a_compensation_is_performed_once_and_replayed_after(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    resource_id = await performed_id(session, services, step, "o-1")

    first = await post_compensation(session, services.base_url, step, resource_id, attempt=1)
    again = await post_compensation(session, services.base_url, step, resource_id, attempt=1)
    action_again = await post_action(session, services.base_url, step, "o-1")

    assert first == (
        201,
        {
            step.id_field: resource_id,
            "orderId": "o-1",
            "attempt": 1,
            "replayed": False,
            "status": step.compensated_status,
        },
    )
    assert again == (200, {**first[1], "replayed": True})
    assert action_again[1]["status"] == step.compensated_status
    entries = (await get_json(session, f"{services.url(step.name)}/ledger?orderId=o-1"))["entries"]
    assert [(e["kind"], e[step.id_field], e["idempotencyKey"]) for e in entries] == [
        (step.action_effect.value, resource_id, f"o-1:{step.action}"),
        (step.compensation_effect.value, resource_id, None),
    ]
    assert services.stats(step.name)["side_effects_per_order"] == {
        "o-1": {step.action_effect.value: 1, step.compensation_effect.value: 1}
    }


@by_name
async def test_a_compensation_of_an_id_never_issued_is_404(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    status, body = await post_compensation(
        session, services.base_url, step, f"{step.id_prefix}-999999", attempt=1
    )

    assert status == 404
    assert body["error"] == f"unknown-{step.action_effect}"
    assert body[step.id_field] == f"{step.id_prefix}-999999"
    assert services.ledger_entries(step.name) == []


@by_name
async def test_a_compensation_is_fenced_and_raises_the_fence(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    resource_id = await performed_id(session, services, step, "o-1")

    newer = await post_compensation(session, services.base_url, step, resource_id, attempt=3)
    stale_compensation = await post_compensation(
        session, services.base_url, step, resource_id, attempt=2
    )
    stale_action = await post_action(session, services.base_url, step, "o-1", attempt=2, key="k")

    assert newer[0] == 201
    assert (stale_compensation[0], stale_compensation[1]["currentAttempt"]) == (409, 3)
    assert stale_action[0] == 409
    assert services.stats(step.name)["stale_writes_refused"] == 2


@pytest.mark.parametrize(
    "plan",
    [
        FaultPlan(rules=(FaultRule(FaultKind.DISPATCHED, operation="cancel", times=1),)),
        FaultPlan(rules=(FaultRule(FaultKind.DISPATCHED, operation="ship"),)),
        FaultPlan(dispatch_after_seconds=0),
    ],
    ids=["dispatched-before-the-cancel", "dispatched-when-shipped", "dispatched-after-a-time"],
)
async def test_a_dispatched_shipment_cannot_be_cancelled(
    services: SimulatedServices, session: aiohttp.ClientSession, plan: FaultPlan
) -> None:
    services.replace_fault_plan(SHIPPING.name, plan)
    _, shipped = await post_action(session, services.base_url, SHIPPING, "o-1")
    shipment_id = shipped["shipmentId"]

    first = await post_compensation(session, services.base_url, SHIPPING, shipment_id, 1)
    services.replace_fault_plan(SHIPPING.name, FaultPlan())
    again = await post_compensation(session, services.base_url, SHIPPING, shipment_id, 1)
    replayed = await post_action(session, services.base_url, SHIPPING, "o-1")

    assert first[0] == again[0] == 422
    assert first[1]["error"] == again[1]["error"] == "already-dispatched"
    assert (first[1]["shipmentId"], first[1]["orderId"]) == (shipment_id, "o-1")
    assert first[1]["dispatchedAt"].endswith("Z")
    assert replayed[1]["status"] == "dispatched"
    assert [e.kind.value for e in services.ledger_entries(SHIPPING.name)] == ["shipment"]
    stats = services.stats(SHIPPING.name)
    assert (stats["dispatched"], stats["cancellations"], stats["cancellations_refused"]) == (
        1,
        0,
        2,
    )


async def test_a_shipment_younger_than_the_dispatch_time_is_cancelled(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    await put_faults(session, services.url(SHIPPING.name), {"dispatchAfterSeconds": 3600})
    shipment_id = await performed_id(session, services, SHIPPING, "o-1")

    status, body = await post_compensation(session, services.base_url, SHIPPING, shipment_id, 1)

    assert (status, body["status"]) == (201, "cancelled")
    assert services.stats(SHIPPING.name)["dispatched"] == 0


async def test_a_cancelled_shipment_is_never_dispatched(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    shipment_id = await performed_id(session, services, SHIPPING, "o-1")
    assert (await post_compensation(session, services.base_url, SHIPPING, shipment_id, 1))[0] == 201
    services.replace_fault_plan(SHIPPING.name, FaultPlan(probabilities={FaultKind.DISPATCHED: 1}))

    status, body = await post_compensation(session, services.base_url, SHIPPING, shipment_id, 1)

    assert (status, body["status"], body["replayed"]) == (200, "cancelled", True)
    assert services.stats(SHIPPING.name)["dispatched"] == 0


@pytest.mark.parametrize(
    ("kind", "status", "error", "compensated", "retried"),
    [
        (FaultKind.TRANSIENT, 503, "transient", 0, 201),
        (FaultKind.PERMANENT, 422, "permanent", 0, 201),
        (FaultKind.LOST_RESPONSE, 503, "transient", 1, 200),
    ],
    ids=lambda value: getattr(value, "value", None),
)
@by_name
async def test_a_compensation_fault_is_answered_like_an_action_fault(
    services: SimulatedServices,
    session: aiohttp.ClientSession,
    step: ServiceDeclaration,
    kind: FaultKind,
    status: int,
    error: str,
    compensated: int,
    retried: int,
) -> None:
    resource_id = await performed_id(session, services, step, "o-1")
    services.replace_fault_plan(
        step.name, FaultPlan(rules=(FaultRule(kind, operation=step.compensation, times=1),))
    )

    faulted = await post_compensation(session, services.base_url, step, resource_id, 1)
    performed_before_retry = compensations(services, step)
    retry = await post_compensation(session, services.base_url, step, resource_id, 1)

    assert (faulted[0], faulted[1]["error"]) == (status, error)
    assert performed_before_retry == compensated
    assert retry[0] == retried
    assert compensations(services, step) == 1
    assert services.stats(step.name)["faults_injected"][kind.value] == 1


async def test_a_compensation_that_fails_for_good_fails_every_time_until_the_plan_changes(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    await put_faults(
        session,
        services.url(PAYMENT.name),
        {"rules": [{"kind": "permanent", "orderId": "o-1", "operation": "refund"}]},
    )
    payment_id = await performed_id(session, services, PAYMENT, "o-1")

    refunds = [
        (await post_compensation(session, services.base_url, PAYMENT, payment_id, 1))[0]
        for _ in range(3)
    ]
    other = await performed_id(session, services, PAYMENT, "o-2")
    other_refund = await post_compensation(session, services.base_url, PAYMENT, other, 1)

    assert refunds == [422, 422, 422]
    assert other_refund[0] == 201
    assert services.stats(PAYMENT.name)["side_effects_per_order"]["o-1"] == {
        "payment": 1,
        "refund": 0,
    }


async def test_a_stalled_compensation_hangs_until_the_client_gives_up_then_a_retry_performs_it(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    reservation_id = await performed_id(session, services, STOCK, "o-1")
    services.replace_fault_plan(
        STOCK.name, FaultPlan(rules=(FaultRule(FaultKind.HANG, operation="release", times=1),))
    )

    stalled = asyncio.create_task(
        post_compensation(
            session,
            services.base_url,
            STOCK,
            reservation_id,
            1,
            client_timeout=aiohttp.ClientTimeout(total=0.5),
        )
    )
    await eventually(
        lambda: services.stats(STOCK.name)["faults_injected"]["hang"] == 1, "the release to stall"
    )
    assert (await post_action(session, services.base_url, STOCK, "o-2"))[0] == 201
    with pytest.raises(TimeoutError):
        await stalled
    assert compensations(services, STOCK) == 0

    retry = await post_compensation(session, services.base_url, STOCK, reservation_id, 1)

    assert (retry[0], retry[1]["status"]) == (201, "released")


async def test_the_net_effect_and_timing_of_each_order_can_be_read_from_the_evidence(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    for order in ("o-1", "o-2", "o-3"):
        await performed_id(session, services, PAYMENT, order)
    await post_action(session, services.base_url, PAYMENT, "o-3", key="o-3:again", attempt=2)
    for order in ("o-1", "o-3"):
        [charged, *_] = services.ledger_entries(PAYMENT.name, order)
        await post_compensation(session, services.base_url, PAYMENT, charged.resource_id, 2)

    net: Counter[str] = Counter()
    for effect in services.ledger_entries(PAYMENT.name):
        net[effect.order_id] += 1 if effect.role is Role.ACTION else -1
    per_order = services.stats(PAYMENT.name)["side_effects_per_order"]

    assert dict(net) == {"o-1": 0, "o-2": 1, "o-3": 1}
    assert {order: c["payment"] - c["refund"] for order, c in per_order.items()} == dict(net)
    assert services.stats(PAYMENT.name)["double_side_effects"] == 1, "o-3 was charged twice"
    times = [dt.datetime.fromisoformat(e.at) for e in services.ledger_entries(PAYMENT.name)]
    assert times == sorted(times)
    assert all(moment.tzinfo == dt.UTC for moment in times)
