"""Status replies leave the app at one edge, which holds them against REPLY_QUEUES at the
moment they are sent (R1, R2): a queue taken off the allow-list since the order was
submitted gets nothing, while the allow-listed queue gets its status. Through the app's own
publisher and the real SDK, against the embedded broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from azure.servicebus.aio import ServiceBusClient
from devhost.testing import eventually_true, queue, running_broker

import bootstrap
from activities.replies import send_statuses
from domain.contracts import OrderStatus
from domain.transitions import new_record
from domain.workflow import DEFAULT_ORDER_STEPS
from services.status import status_for

pytestmark = pytest.mark.asyncio

TIMEOUT_SECONDS = 10.0
NOW = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)


@pytest.fixture
async def app_on_a_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """The app's settings point at a broker with two reply queues, one of them allowed."""
    # The app's services are built once per process from the settings: drop any an earlier
    # test of this worker left, so these settings are the ones the app reads.
    await asyncio.wait_for(bootstrap.shutdown(), TIMEOUT_SECONDS)
    with running_broker([queue("replies-a"), queue("replies-gone")]) as broker:
        monkeypatch.setenv("ServiceBusConnection", broker.connection_string)
        monkeypatch.setenv("REPLY_QUEUES", "replies-a")
        monkeypatch.setenv("SQLITE_DIRECTORY", str(tmp_path))
        try:
            yield broker.connection_string
        finally:
            await asyncio.wait_for(bootstrap.shutdown(), TIMEOUT_SECONDS)


async def peeked(connection_string: str, queue_name: str) -> list[str]:
    async with ServiceBusClient.from_connection_string(connection_string) as client:
        receiver = client.get_queue_receiver(queue_name)
        async with receiver:
            messages = await receiver.peek_messages(max_message_count=10, timeout=2)
    return [str(message.message_id) for message in messages]


async def test_a_reply_queue_removed_from_the_allow_list_gets_no_status_r1(
    app_on_a_broker: str,
) -> None:
    statuses = [
        status_for(new_record(order_id, reply_to, NOW, DEFAULT_ORDER_STEPS), status, now=NOW)
        for order_id, reply_to, status in (
            ("o-kept", "replies-a", OrderStatus.RECEIVED),
            ("o-dropped", "replies-gone", OrderStatus.RECEIVED),
        )
    ]
    assert all(status is not None for status in statuses)

    await asyncio.wait_for(send_statuses(s for s in statuses if s), TIMEOUT_SECONDS)

    # A peek answers what the broker has stored so far; on a busy machine the first may
    # come back empty, so look again within a bound.
    async def kept_arrived() -> bool:
        return await peeked(app_on_a_broker, "replies-a") == ["o-kept:received:-"]

    await eventually_true(kept_arrived, "the allow-listed queue's status", TIMEOUT_SECONDS)
    assert await peeked(app_on_a_broker, "replies-gone") == []
    assert bootstrap.publisher().sent == {"replies-a": 1}
