"""Fulfilment simulator, fencing tokens enforced at the target (E7, D4/E5 at the remote side)."""

from typing import Any

import aiohttp

from tests.integration.simulators.service_calls import post_cancel, post_fulfilment
from tools.simulators.fulfilment import FulfilmentService

ITEMS = [{"sku": "sku-1", "quantity": 1}]


async def fulfil(
    session: aiohttp.ClientSession,
    service: FulfilmentService,
    key: str,
    attempt: int,
    order_id: str = "o-1",
) -> tuple[int, dict[str, Any]]:
    return await post_fulfilment(
        session, service.base_url, key=key, order_id=order_id, attempt=attempt, items=ITEMS
    )


async def cancel(
    session: aiohttp.ClientSession, service: FulfilmentService, fulfilment_id: str, attempt: int
) -> tuple[int, dict[str, Any]]:
    return await post_cancel(session, service.base_url, fulfilment_id, attempt)


async def stale_writes_refused(session: aiohttp.ClientSession, service: FulfilmentService) -> int:
    async with session.get(f"{service.base_url}/stats") as response:
        count: int = (await response.json())["stale_writes_refused"]
        return count


async def test_a_stale_attempt_is_refused_and_counted(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    assert (await fulfil(session, service, "o-1:a2", attempt=2))[0] == 201

    status, body = await fulfil(session, service, "o-1:a1", attempt=1)

    assert status == 409
    assert (body["error"], body["attempt"], body["currentAttempt"]) == ("stale-attempt", 1, 2)
    assert "o-1" in body["message"]
    assert [e.attempt for e in service.ledger_entries("o-1")] == [2]
    assert await stale_writes_refused(session, service) == 1


async def test_retries_of_the_current_attempt_pass_the_fence(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    assert (await fulfil(session, service, "o-1:fulfil", attempt=3))[0] == 201
    assert (await fulfil(session, service, "o-1:fulfil", attempt=3))[0] == 200
    assert await stale_writes_refused(session, service) == 0


async def test_a_newer_attempt_replaying_the_key_raises_the_fence(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    _, performed = await fulfil(session, service, "o-1:fulfil", attempt=1)

    status, replayed = await fulfil(session, service, "o-1:fulfil", attempt=2)
    late = await fulfil(session, service, "o-1:fulfil", attempt=1)

    assert status == 200
    assert replayed["fulfilmentId"] == performed["fulfilmentId"]
    assert replayed["attempt"] == 1, "the replay describes the attempt that performed it"
    assert late[0] == 409
    assert late[1]["currentAttempt"] == 2
    assert len(service.ledger_entries("o-1")) == 1


async def test_cancel_is_fenced_and_raises_the_fence(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    _, performed = await fulfil(session, service, "o-1:fulfil", attempt=1)
    fulfilment_id = performed["fulfilmentId"]

    assert (await cancel(session, service, fulfilment_id, attempt=3))[0] == 201
    stale_cancel = await cancel(session, service, fulfilment_id, attempt=2)
    stale_fulfil = await fulfil(session, service, "o-1:other", attempt=2)

    assert stale_cancel[0] == 409
    assert stale_cancel[1]["currentAttempt"] == 3
    assert stale_fulfil[0] == 409
    assert [e.kind.value for e in service.ledger_entries("o-1")] == ["fulfilment", "compensation"]
    assert await stale_writes_refused(session, service) == 2


async def test_fences_are_per_order(
    service: FulfilmentService, session: aiohttp.ClientSession
) -> None:
    assert (await fulfil(session, service, "o-1:fulfil", attempt=5))[0] == 201
    assert (await fulfil(session, service, "o-2:fulfil", attempt=1, order_id="o-2"))[0] == 201
    assert await stale_writes_refused(session, service) == 0
