"""Stock, payment and shipping simulators: idempotency keys (E7, C8) and fencing tokens (E7)
enforced at each target, the requests they refuse before deciding anything (the payment
service's refusal of card data among them, C3), and the ledger of what they performed."""

from typing import Any

import aiohttp
import pytest

from tests.integration.simulators.service_calls import ITEMS, TIMEOUT, get_json, post_action
from tools.simulators.services import (
    PAYMENT,
    SHIPPING,
    STOCK,
    ServiceDeclaration,
    SimulatedServices,
)

STEP_SERVICES = [STOCK, PAYMENT, SHIPPING]
OTHER_PAYLOADS: dict[str, dict[str, Any]] = {
    STOCK.name: {"items": [{"sku": "sku-9", "quantity": 1}]},
    PAYMENT.name: {"amount": 999, "currency": "EUR"},
    SHIPPING.name: {"items": [{"sku": "sku-9", "quantity": 1}]},
}
by_name = pytest.mark.parametrize("step", STEP_SERVICES, ids=lambda s: s.name)


@by_name
async def test_repeat_with_same_key_replays_without_a_new_side_effect(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    first = await post_action(session, services.base_url, step, "o-1")
    again = await post_action(session, services.base_url, step, "o-1")

    assert first == (
        201,
        {
            step.id_field: f"{step.id_prefix}-000001",
            "orderId": "o-1",
            "attempt": 1,
            "replayed": False,
            "status": step.performed_status,
        },
    )
    assert again == (200, {**first[1], "replayed": True})
    ledger = await get_json(session, f"{services.url(step.name)}/ledger")
    assert [(e["kind"], e["orderId"], e[step.id_field]) for e in ledger["entries"]] == [
        (step.action_effect.value, "o-1", first[1][step.id_field])
    ]
    stats = services.stats(step.name)
    assert (stats[f"{step.action_effect}s"], stats["replays"], stats["double_side_effects"]) == (
        1,
        1,
        0,
    )


@pytest.mark.parametrize("other", ["other-payload", "other-order"])
@by_name
async def test_same_key_with_a_different_request_is_refused_as_reuse(
    services: SimulatedServices,
    session: aiohttp.ClientSession,
    step: ServiceDeclaration,
    other: str,
) -> None:
    assert (await post_action(session, services.base_url, step, "o-1", key="k-1"))[0] == 201

    other_payload = other == "other-payload"
    status, body = await post_action(
        session,
        services.base_url,
        step,
        "o-1" if other_payload else "o-2",
        key="k-1",
        payload=OTHER_PAYLOADS[step.name] if other_payload else None,
    )

    assert (status, body["error"]) == (422, "idempotency-key-reuse")
    assert "k-1" in body["message"]
    assert len(services.ledger_entries(step.name)) == 1
    assert services.stats(step.name)["idempotency_key_reuse_refused"] == 1


@by_name
async def test_a_stale_attempt_is_refused_and_a_newer_attempt_replays_the_key(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    _, performed = await post_action(session, services.base_url, step, "o-1", attempt=1)

    newer = await post_action(session, services.base_url, step, "o-1", attempt=2)
    stale = await post_action(session, services.base_url, step, "o-1", attempt=1, key="late")

    assert newer == (200, {**performed, "replayed": True})
    assert stale[0] == 409
    assert (stale[1]["error"], stale[1]["currentAttempt"]) == ("stale-attempt", 2)
    assert [e.attempt for e in services.ledger_entries(step.name, "o-1")] == [1]
    assert services.stats(step.name)["stale_writes_refused"] == 1


async def test_fences_are_per_order(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    assert (await post_action(session, services.base_url, STOCK, "o-1", attempt=5))[0] == 201

    other_order = await post_action(session, services.base_url, STOCK, "o-2", attempt=1)

    assert other_order[0] == 201, "attempt 5 of o-1 does not fence o-2"
    assert services.stats(STOCK.name)["stale_writes_refused"] == 0


async def test_each_service_keeps_its_own_fences_keys_and_ledger(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    assert (await post_action(session, services.base_url, STOCK, "o-1", attempt=3))[0] == 201

    later = [
        (await post_action(session, services.base_url, step, "o-1", attempt=1, key="same"))[0]
        for step in (PAYMENT, SHIPPING)
    ]

    assert later == [201, 201], "a fence or a key at stock does not reach other services"
    assert {
        name: [e.kind.value for e in services.ledger_entries(name)]
        for name in ("stock", "payment", "shipping")
    } == {
        "stock": ["reservation"],
        "payment": ["payment"],
        "shipping": ["shipment"],
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"amount": 1250, "currency": "EUR", "cardNumber": "4111111111111111"}, "cardNumber"),
        ({"amount": 0, "currency": "EUR"}, "amount"),
        ({"amount": 12.5, "currency": "EUR"}, "amount"),
        ({"amount": 1250, "currency": "eur"}, "currency"),
        ({"amount": 1250}, "currency"),
    ],
    ids=["card-data", "zero", "not-minor-units", "lower-case-currency", "no-currency"],
)
async def test_a_charge_takes_a_reference_to_money_only(
    services: SimulatedServices, session: aiohttp.ClientSession, body: dict[str, Any], field: str
) -> None:
    status, refusal = await post_action(session, services.base_url, PAYMENT, "o-1", payload=body)

    assert (status, refusal["error"]) == (400, "invalid-request")
    assert field in refusal["message"]
    assert services.ledger_entries(PAYMENT.name) == []


@pytest.mark.parametrize("step", [STOCK, SHIPPING], ids=lambda s: s.name)
async def test_an_action_without_items_is_refused(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    status, refusal = await post_action(
        session, services.base_url, step, "o-1", payload={"items": []}
    )

    assert (status, refusal["error"]) == (400, "invalid-request")
    assert "items" in refusal["message"]


async def test_an_action_without_an_idempotency_key_is_refused(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    async with session.post(
        f"{services.base_url}{STOCK.action_path}",
        json={"orderId": "o-1", "attempt": 1, "items": ITEMS},
        timeout=TIMEOUT,
    ) as response:
        status, refusal = response.status, await response.json()

    assert (status, refusal["error"]) == (400, "missing-idempotency-key")
    assert services.ledger_entries(STOCK.name) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"attempt": 1, "items": ITEMS}, "orderId"),
        ({"orderId": "o 1", "attempt": 1, "items": ITEMS}, "orderId"),
        ({"orderId": "o-1", "attempt": 0, "items": ITEMS}, "attempt"),
        ({"orderId": "o-1", "attempt": True, "items": ITEMS}, "attempt"),
        ({"orderId": "o-1", "attempt": 1, "items": [{"sku": "a", "quantity": 0}]}, "items[0]"),
        (["not", "an", "object"], "JSON object"),
    ],
    ids=[
        "no-order",
        "order-id-with-a-space",
        "attempt-zero",
        "attempt-boolean",
        "no-quantity",
        "not-an-object",
    ],
)
async def test_an_invalid_action_body_is_refused_naming_the_field(
    services: SimulatedServices, session: aiohttp.ClientSession, body: object, field: str
) -> None:
    async with session.post(
        f"{services.base_url}{STOCK.action_path}",
        json=body,
        headers={"Idempotency-Key": "k"},
        timeout=TIMEOUT,
    ) as response:
        status, refusal = response.status, await response.json()

    assert (status, refusal["error"]) == (400, "invalid-request")
    assert field in refusal["message"]
    assert services.ledger_entries(STOCK.name) == []


async def test_the_ledger_lists_side_effects_in_order_and_filters_by_order(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    for order_id in ("o-a", "o-b", "o-a2"):
        assert (await post_action(session, services.base_url, STOCK, order_id))[0] == 201

    url = f"{services.url(STOCK.name)}/ledger"
    everything = (await get_json(session, url))["entries"]
    only_b = (await get_json(session, f"{url}?orderId=o-b"))["entries"]
    only_a = (await get_json(session, f"{url}?orderId=o-a"))["entries"]

    assert [(e["sequence"], e["orderId"]) for e in everything] == [
        (1, "o-a"),
        (2, "o-b"),
        (3, "o-a2"),
    ]
    assert (only_b, only_a) == ([everything[1]], [everything[0]]), "the filter is exact"
    assert all(e["at"].endswith("Z") for e in everything)
