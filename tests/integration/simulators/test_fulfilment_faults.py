"""Fulfilment simulator, fault injection on demand (E6-E9): kinds, rules, presets, seeds."""

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
import pytest
from devhost.testing import eventually

from tests.integration.simulators.service_calls import TIMEOUT, post_fulfilment
from tools.simulators.fulfilment import (
    PRESETS,
    FaultKind,
    FaultPlan,
    FaultRule,
    FulfilmentService,
    Operation,
)

ITEMS = [{"sku": "sku-1", "quantity": 1}]


async def fulfil(
    session: aiohttp.ClientSession,
    base_url: str,
    order_id: str,
    attempt: int = 1,
    client_timeout: aiohttp.ClientTimeout = TIMEOUT,
) -> tuple[int, dict[str, Any]]:
    return await post_fulfilment(
        session,
        base_url,
        key=f"{order_id}:fulfil",
        order_id=order_id,
        attempt=attempt,
        items=ITEMS,
        client_timeout=client_timeout,
    )


async def put_faults(
    session: aiohttp.ClientSession, service: FulfilmentService, plan: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    async with session.put(f"{service.base_url}/faults", json=plan) as response:
        return response.status, await response.json()


def injected(service: FulfilmentService, kind: FaultKind) -> int:
    count: int = service.stats()["faults_injected"][kind.value]
    return count


async def test_transient_fault_is_503_with_retry_after_and_performs_nothing(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    await put_faults(
        session,
        service,
        {"retryAfterSeconds": 2, "rules": [{"kind": "transient", "orderId": "o-1", "times": 1}]},
    )

    async with session.post(
        f"{service.base_url}/fulfilments",
        json={"orderId": "o-1", "attempt": 1, "items": ITEMS},
        headers={"Idempotency-Key": "o-1:fulfil"},
    ) as response:
        assert response.status == 503
        assert response.headers["Retry-After"] == "2"
        assert (await response.json())["error"] == "transient"
    assert service.ledger_entries() == []

    assert (await fulfil(session, service.base_url, "o-1"))[0] == 201
    assert injected(service, FaultKind.TRANSIENT) == 1


async def test_permanent_fault_is_422_and_performs_nothing(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    service.replace_fault_plan(FaultPlan(rules=(FaultRule(FaultKind.PERMANENT, order_id="o-1"),)))

    status, body = await fulfil(session, service.base_url, "o-1")

    assert status == 422
    assert body["error"] == "permanent"
    assert "o-1" in body["message"]
    assert service.ledger_entries() == []
    assert injected(service, FaultKind.PERMANENT) == 1


async def test_latency_fault_delays_then_succeeds(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    service.replace_fault_plan(
        FaultPlan(rules=(FaultRule(FaultKind.LATENCY, order_id="o-1", delay_seconds=0.2),))
    )

    status, body = await fulfil(session, service.base_url, "o-1")

    assert status == 201
    assert body["replayed"] is False
    assert len(service.ledger_entries("o-1")) == 1
    assert injected(service, FaultKind.LATENCY) == 1


async def test_hang_lasts_until_the_client_gives_up_and_others_are_still_served(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    service.replace_fault_plan(
        FaultPlan(rules=(FaultRule(FaultKind.HANG, order_id="o-hang", times=1),))
    )

    with pytest.raises(TimeoutError):
        await fulfil(
            session, service.base_url, "o-hang", client_timeout=aiohttp.ClientTimeout(total=0.5)
        )

    assert (await fulfil(session, service.base_url, "o-other"))[0] == 201
    assert (await fulfil(session, service.base_url, "o-hang"))[0] == 201
    assert [e.order_id for e in service.ledger_entries()] == ["o-other", "o-hang"]
    assert injected(service, FaultKind.HANG) == 1


async def test_hang_serves_others_while_it_hangs_and_does_not_block_shutdown(
    session: aiohttp.ClientSession,
) -> None:
    service = FulfilmentService(FaultPlan(rules=(FaultRule(FaultKind.HANG, order_id="o-hang"),)))
    await service.start()
    try:
        hanging = asyncio.create_task(fulfil(session, service.base_url, "o-hang"))
        await eventually(lambda: injected(service, FaultKind.HANG) == 1, "the hang to start")
        assert (await fulfil(session, service.base_url, "o-other"))[0] == 201
        assert not hanging.done()
    finally:
        await asyncio.wait_for(service.stop(), timeout=10)

    status, body = await asyncio.wait_for(hanging, timeout=10)
    assert (status, body["error"]) == (503, "stopping")
    assert service.ledger_entries("o-hang") == []


async def test_rule_for_the_first_calls_of_an_order_then_heals(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    await put_faults(
        session,
        service,
        {
            "rules": [
                {"kind": "transient", "orderId": "o-1", "times": 2},
                {"kind": "permanent", "orderId": "o-1", "skip": 2, "times": 1},
            ]
        },
    )

    statuses = [(await fulfil(session, service.base_url, "o-1"))[0] for _ in range(5)]

    assert statuses == [503, 503, 422, 201, 200]


async def test_rule_for_every_call_of_an_order_leaves_other_orders_alone(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    await put_faults(session, service, {"rules": [{"kind": "permanent", "orderId": "bad-*"}]})

    bad = [(await fulfil(session, service.base_url, f"bad-{n % 2}"))[0] for n in range(4)]
    good = (await fulfil(session, service.base_url, "good-1"))[0]

    assert (bad, good) == ([422] * 4, 201)


async def test_rules_filter_on_attempt_and_operation(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    service.replace_fault_plan(
        FaultPlan(
            rules=(
                FaultRule(FaultKind.TRANSIENT, order_id="o-1", attempt=1),
                FaultRule(FaultKind.PERMANENT, operation=Operation.CANCEL, times=1),
            )
        )
    )

    assert (await fulfil(session, service.base_url, "o-1", attempt=1))[0] == 503
    status, fulfilled = await fulfil(session, service.base_url, "o-1", attempt=2)
    assert status == 201
    cancel_url = f"{service.base_url}/fulfilments/{fulfilled['fulfilmentId']}/cancel"
    cancels = []
    for _ in range(2):
        async with session.post(cancel_url, json={"attempt": 2}) as response:
            cancels.append(response.status)

    assert cancels == [422, 201]


async def test_put_faults_makes_the_service_fail_then_heal(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    status, plan = await put_faults(session, service, {"probabilities": {"transient": 1.0}})
    assert (status, plan["probabilities"]) == (200, {"transient": 1.0})
    failing = [(await fulfil(session, service.base_url, f"o-{n}"))[0] for n in range(3)]

    await put_faults(session, service, {"preset": "none"})
    healed = [(await fulfil(session, service.base_url, f"o-{n}"))[0] for n in range(3)]

    assert (failing, healed) == ([503] * 3, [201] * 3)
    async with session.get(f"{service.base_url}/faults") as response:
        assert (await response.json())["probabilities"] == {}


@pytest.mark.parametrize(
    ("plan", "complaint"),
    [
        ({"preset": "gentle"}, "gentle"),
        ({"probabilities": {"transient": 0.7, "hang": 0.5}}, "add up"),
        ({"probabilities": {"meteor": 0.1}}, "meteor"),
        ({"rules": [{"kind": "transient", "times": 0}]}, "times"),
        ({"rules": [{"kind": "flood"}]}, "kind"),
        ({"latencySeconds": [2, 1]}, "latencySeconds"),
        ({"retries": 3}, "retries"),
    ],
)
async def test_an_invalid_plan_is_refused_and_the_old_one_kept(
    service: FulfilmentService,
    session: aiohttp.ClientSession,
    plan: dict[str, Any],
    complaint: str,
) -> None:
    status, body = await put_faults(session, service, plan)

    assert status == 400
    assert body["error"] == "invalid-fault-plan"
    assert complaint in body["message"]
    assert (await fulfil(session, service.base_url, "o-1"))[0] == 201


DETERMINISM_PLAN = FaultPlan(
    probabilities={
        FaultKind.TRANSIENT: 0.3,
        FaultKind.PERMANENT: 0.1,
        FaultKind.LOST_RESPONSE: 0.2,
    }
)
ORDERS = [f"o-{n}" for n in range(8)]
CALLS_PER_ORDER = 5


async def outcomes(seed: int, schedule: Sequence[str]) -> dict[str, list[int]]:
    """Send ``schedule`` (one order id per call) in sequence; the statuses seen per order."""
    service = FulfilmentService(DETERMINISM_PLAN, seed=seed)
    await service.start()
    seen: dict[str, list[int]] = {order_id: [] for order_id in ORDERS}
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            for order_id in schedule:
                seen[order_id].append((await fulfil(session, service.base_url, order_id))[0])
    finally:
        await service.stop()
    return seen


async def test_same_seed_and_requests_give_the_same_faults() -> None:
    by_order = [order_id for order_id in ORDERS for _ in range(CALLS_PER_ORDER)]
    round_robin = [order_id for _ in range(CALLS_PER_ORDER) for order_id in ORDERS]

    first = await outcomes(11, by_order)
    repeated = await outcomes(11, by_order)
    interleaved = await outcomes(11, round_robin)
    other_seed = await outcomes(12, by_order)

    assert repeated == first
    assert interleaved == first, "faults per order do not depend on other orders' traffic"
    assert other_seed != first
    statuses = {status for per_order in first.values() for status in per_order}
    assert {503, 422, 201} <= statuses, "the mix injected faults and let calls through"


async def test_service_started_with_a_preset_serves_that_plan(
    session: aiohttp.ClientSession,
) -> None:
    service = FulfilmentService(FaultPlan.preset("harsh"), seed=3)
    await service.start()
    try:
        async with session.get(f"{service.base_url}/faults") as response:
            plan = FaultPlan.from_json(await response.json())
    finally:
        await service.stop()

    assert plan == PRESETS["harsh"]
    assert plan.probabilities[FaultKind.LOST_RESPONSE] > 0


async def test_stats_count_calls_outcomes_and_faults_by_kind(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    await put_faults(
        session,
        service,
        {
            "rules": [
                {"kind": "transient", "orderId": "o-1", "times": 1},
                {"kind": "lost-response", "orderId": "o-1", "skip": 1, "times": 1},
                {"kind": "permanent", "orderId": "o-2"},
            ]
        },
    )
    before = time.time()
    statuses = [
        (await fulfil(session, service.base_url, "o-1"))[0],
        (await fulfil(session, service.base_url, "o-1"))[0],
        (await fulfil(session, service.base_url, "o-1"))[0],
        (await fulfil(session, service.base_url, "o-1", attempt=2))[0],
        (await fulfil(session, service.base_url, "o-1", attempt=1))[0],
        (await fulfil(session, service.base_url, "o-2"))[0],
        (await fulfil(session, service.base_url, "o-3"))[0],
    ]
    async with session.get(f"{service.base_url}/stats") as response:
        stats = await response.json()
    after = time.time()
    times = stats.pop("faults_injected_times")

    assert statuses == [503, 503, 200, 200, 409, 422, 201]
    assert sorted((t["kind"], t["count"]) for t in times) == [
        ("lost-response", 1),
        ("permanent", 1),
        ("transient", 1),
    ]
    assert all(before <= t["at"] <= after for t in times), times
    assert stats == {
        "requests": 7,
        "fulfilments": 2,
        "compensations": 0,
        "side_effects_per_order": {
            "o-1": {"fulfilment": 1, "compensation": 0},
            "o-3": {"fulfilment": 1, "compensation": 0},
        },
        "double_side_effects": 0,
        "stale_writes_refused": 1,
        "idempotency_key_reuse_refused": 0,
        "replays": 2,
        "tombstones": 0,
        "actions_refused_after_undo": 0,
        "faults_injected": {
            "transient": 1,
            "latency": 0,
            "hang": 0,
            "permanent": 1,
            "lost-response": 1,
        },
        "faults_injected_by_operation": {
            "fulfil": {
                "transient": 1,
                "latency": 0,
                "hang": 0,
                "permanent": 1,
                "lost-response": 1,
            },
            "cancel": {
                "transient": 0,
                "latency": 0,
                "hang": 0,
                "permanent": 0,
                "lost-response": 0,
            },
        },
        "latency_delays": {},
    }
