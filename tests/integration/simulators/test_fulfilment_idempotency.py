"""Fulfilment simulator, idempotency at the target (E7, C8) and compensation (C1), over HTTP."""

import asyncio
from typing import Any

import aiohttp
import pytest

from tests.integration.simulators.service_calls import TIMEOUT, post_cancel, post_fulfilment
from tools.simulators.fulfilment import FaultKind, FaultPlan, FaultRule, FulfilmentService

ITEMS = [{"sku": "sku-1", "quantity": 2}, {"sku": "sku-2", "quantity": 1}]


async def fulfil(
    session: aiohttp.ClientSession,
    service: FulfilmentService,
    key: str,
    order_id: str = "o-1",
    attempt: int = 1,
    items: list[dict[str, Any]] = ITEMS,
) -> tuple[int, dict[str, Any]]:
    return await post_fulfilment(
        session, service.base_url, key=key, order_id=order_id, attempt=attempt, items=items
    )


async def cancel(
    session: aiohttp.ClientSession, service: FulfilmentService, fulfilment_id: str, attempt: int
) -> tuple[int, dict[str, Any]]:
    return await post_cancel(session, service.base_url, fulfilment_id, attempt)


async def get_json(
    session: aiohttp.ClientSession, service: FulfilmentService, path: str
) -> dict[str, Any]:
    async with session.get(f"{service.base_url}{path}") as response:
        assert response.status == 200
        body: dict[str, Any] = await response.json()
        return body


async def test_repeat_with_same_key_replays_without_a_new_side_effect(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    first = await fulfil(session, service, "o-1:fulfil")
    again = await fulfil(session, service, "o-1:fulfil")

    assert first[0] == 201
    assert first[1]["replayed"] is False
    assert again == (200, {**first[1], "replayed": True})
    ledger = await get_json(session, service, "/ledger")
    assert [(e["kind"], e["orderId"], e["idempotencyKey"]) for e in ledger["entries"]] == [
        ("fulfilment", "o-1", "o-1:fulfil")
    ]
    assert ledger["entries"][0]["fulfilmentId"] == first[1]["fulfilmentId"]
    stats = await get_json(session, service, "/stats")
    assert (stats["fulfilments"], stats["replays"], stats["double_side_effects"]) == (1, 1, 0)


@pytest.mark.parametrize(
    ("order_id", "items"),
    [("o-1", [{"sku": "sku-1", "quantity": 3}]), ("o-2", ITEMS)],
    ids=["other-items", "other-order"],
)
async def test_same_key_with_a_different_request_is_refused_as_reuse(
    service: FulfilmentService,
    session: aiohttp.ClientSession,
    order_id: str,
    items: list[dict[str, Any]],
) -> None:
    assert (await fulfil(session, service, "k-1"))[0] == 201

    status, body = await fulfil(session, service, "k-1", order_id=order_id, items=items)

    assert status == 422
    assert body["error"] == "idempotency-key-reuse"
    assert "k-1" in body["message"]
    assert len((await get_json(session, service, "/ledger"))["entries"]) == 1
    assert (await get_json(session, service, "/stats"))["idempotency_key_reuse_refused"] == 1


async def test_a_request_without_idempotency_key_is_refused(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    async with session.post(
        f"{service.base_url}/fulfilments", json={"orderId": "o-1", "attempt": 1, "items": ITEMS}
    ) as response:
        assert response.status == 400
        assert (await response.json())["error"] == "missing-idempotency-key"
    assert (await get_json(session, service, "/ledger"))["entries"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"attempt": 1, "items": ITEMS}, "orderId"),
        ({"orderId": "o 1", "attempt": 1, "items": ITEMS}, "orderId"),
        ({"orderId": "o-1", "attempt": 0, "items": ITEMS}, "attempt"),
        ({"orderId": "o-1", "attempt": True, "items": ITEMS}, "attempt"),
        ({"orderId": "o-1", "attempt": 1, "items": []}, "items"),
        ({"orderId": "o-1", "attempt": 1, "items": [{"sku": "a", "quantity": 0}]}, "items[0]"),
        (["not", "an", "object"], "JSON object"),
    ],
)
async def test_an_invalid_body_is_refused_naming_the_field(
    service: FulfilmentService, session: aiohttp.ClientSession, body: Any, field: str
) -> None:
    async with session.post(
        f"{service.base_url}/fulfilments", json=body, headers={"Idempotency-Key": "k"}
    ) as response:
        assert response.status == 400
        refusal = await response.json()
    assert refusal["error"] == "invalid-request"
    assert field in refusal["message"]


async def test_concurrent_clients_on_one_key_cause_exactly_one_side_effect(
    service: FulfilmentService,
) -> None:
    # One session per client, so the requests arrive on separate connections at once.
    sessions = [aiohttp.ClientSession(timeout=TIMEOUT) for _ in range(20)]
    try:
        answers = await asyncio.gather(
            *(fulfil(client, service, "o-9:fulfil", order_id="o-9") for client in sessions)
        )
    finally:
        await asyncio.gather(*(client.close() for client in sessions))

    assert sorted(status for status, _ in answers) == [200] * 19 + [201]
    assert len({body["fulfilmentId"] for _, body in answers}) == 1
    assert len(service.ledger_entries("o-9")) == 1
    assert service.stats()["double_side_effects"] == 0


async def test_lost_response_then_retry_with_same_key_is_one_side_effect(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    service.replace_fault_plan(
        FaultPlan(rules=(FaultRule(FaultKind.LOST_RESPONSE, order_id="o-3", times=1),))
    )

    lost = await fulfil(session, service, "o-3:fulfil", order_id="o-3")
    assert lost[0] == 503
    assert lost[1]["error"] == "transient"
    assert len(service.ledger_entries("o-3")) == 1, "the side effect happened despite the 503"

    retried = await fulfil(session, service, "o-3:fulfil", order_id="o-3")

    assert retried[0] == 200
    assert retried[1]["replayed"] is True
    assert retried[1]["fulfilmentId"] == service.ledger_entries("o-3")[0].fulfilment_id
    stats = await get_json(session, service, "/stats")
    assert stats["side_effects_per_order"]["o-3"] == {"fulfilment": 1, "compensation": 0}
    assert stats["double_side_effects"] == 0
    assert stats["faults_injected"]["lost-response"] == 1


async def test_a_new_key_for_a_fulfilled_order_shows_as_a_double_side_effect(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    assert (await fulfil(session, service, "o-4:attempt-1", order_id="o-4"))[0] == 201
    assert (await fulfil(session, service, "o-4:attempt-2", order_id="o-4", attempt=2))[0] == 201
    assert (await fulfil(session, service, "o-5:fulfil", order_id="o-5"))[0] == 201

    stats = await get_json(session, service, "/stats")

    assert stats["double_side_effects"] == 1
    assert stats["side_effects_per_order"]["o-4"]["fulfilment"] == 2


async def test_cancel_compensates_once_however_often_it_is_asked(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    _, fulfilled = await fulfil(session, service, "o-6:fulfil", order_id="o-6")
    fulfilment_id = fulfilled["fulfilmentId"]

    first = await cancel(session, service, fulfilment_id, attempt=1)
    again = await cancel(session, service, fulfilment_id, attempt=1)

    assert first[0] == 201
    assert (first[1]["replayed"], first[1]["status"]) == (False, "cancelled")
    assert again[0] == 200
    assert again[1]["replayed"] is True
    entries = (await get_json(session, service, "/ledger?orderId=o-6"))["entries"]
    assert [(e["kind"], e["fulfilmentId"]) for e in entries] == [
        ("fulfilment", fulfilment_id),
        ("compensation", fulfilment_id),
    ]
    replayed = await fulfil(session, service, "o-6:fulfil", order_id="o-6")
    assert replayed[1]["status"] == "cancelled"
    assert len(service.ledger_entries("o-6")) == 2


async def test_cancel_of_an_unknown_fulfilment_is_404(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    status, body = await cancel(session, service, "ful-999999", attempt=1)

    assert status == 404
    assert body["error"] == "unknown-fulfilment"
    assert service.ledger_entries() == []


async def test_ledger_lists_side_effects_in_order_and_filters_by_order(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    for order_id in ("o-a", "o-b", "o-a2"):
        await fulfil(session, service, f"{order_id}:fulfil", order_id=order_id)

    everything = (await get_json(session, service, "/ledger"))["entries"]
    only_b = (await get_json(session, service, "/ledger?orderId=o-b"))["entries"]

    assert [(e["sequence"], e["orderId"]) for e in everything] == [
        (1, "o-a"),
        (2, "o-b"),
        (3, "o-a2"),
    ]
    assert only_b == [everything[1]]
    assert all(e["at"].endswith("Z") for e in everything)
