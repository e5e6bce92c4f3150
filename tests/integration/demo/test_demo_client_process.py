"""The demo's client app in a process of its own: it submits its workload, hears the statuses
on its reply queue (R1, R2), reports what it saw, and says so when it cannot run."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from devhost.testing import eventually, queue, running_broker

from tools.demo.client_process import ClientProcess, ClientSpec

pytestmark = pytest.mark.asyncio

TIMEOUT_SECONDS = 10.0
BOUND_SECONDS = 30.0


async def answer_every_order(
    connection_string: str, expected_messages: int, conflicts_after_received: list[bool]
) -> set[str]:
    """Play the app: take every submitted message and answer each order with two statuses;
    for each conflicting copy, note whether it was enqueued after its order's `received`
    had been sent."""
    order_ids: set[str] = set()
    received_sent_at: dict[str, dt.datetime] = {}
    taken = 0
    async with ServiceBusClient.from_connection_string(connection_string) as client:
        receiver = client.get_queue_receiver("orders")
        sender = client.get_queue_sender("replies")
        async with receiver, sender:
            deadline = time.monotonic() + BOUND_SECONDS
            while taken < expected_messages and time.monotonic() < deadline:
                for message in await receiver.receive_messages(max_wait_time=1):
                    taken += 1
                    await receiver.complete_message(message)
                    try:
                        order_id = json.loads(b"".join(message.body))["orderId"]
                    except (ValueError, KeyError, TypeError):
                        continue  # a malformed message of the workload: no status
                    if str(message.message_id).endswith(":conflict"):
                        answered_at = received_sent_at.get(order_id)
                        conflicts_after_received.append(
                            answered_at is not None
                            and message.enqueued_time_utc is not None
                            and message.enqueued_time_utc >= answered_at
                        )
                    if order_id in order_ids:
                        continue  # a resend or a conflicting copy
                    order_ids.add(order_id)
                    received_sent_at[order_id] = dt.datetime.now(dt.UTC)
                    for status in ("received", "completed"):
                        body = json.dumps({"orderId": order_id, "status": status})
                        await sender.send_messages(
                            ServiceBusMessage(body, message_id=f"{order_id}:{status}"),
                            timeout=TIMEOUT_SECONDS,
                        )
    assert taken == expected_messages, f"the app took {taken} of {expected_messages} messages"
    return order_ids


async def test_the_client_process_submits_its_workload_and_reports_what_it_heard() -> None:
    with running_broker([queue("orders"), queue("replies")]) as broker:
        # Seed 74: five orders, one exact resend, two conflicting copies, one malformed.
        spec = ClientSpec(broker.connection_string, "orders", "replies", orders=5, seed=74)
        workload = spec.workload()
        conflicts: list[bool] = []
        client = ClientProcess(spec)
        try:
            await client.start()
            answered = await answer_every_order(
                broker.connection_string, len(workload.messages), conflicts
            )
            await eventually(lambda: client.finished == 5, "five orders finished")
            outcome = await client.stop()
        finally:
            await client.close()

    assert answered == set(workload.order_ids)
    assert (workload.count("conflict"), workload.count("resend")) == (2, 1)
    assert conflicts == [True, True], "conflicting copies go out after the original's received"
    assert outcome.sent == len(workload.messages)
    assert set(outcome.log.finished_at) == set(workload.order_ids)
    assert set(outcome.log.submitted_at) == set(workload.order_ids)
    assert outcome.log.statuses == {"received": 5, "completed": 5}
    assert outcome.started <= min(outcome.log.submitted_at.values())
    assert all(
        outcome.log.finished_at[order] >= outcome.log.submitted_at[order]
        for order in workload.order_ids
    )


async def test_a_client_process_that_cannot_listen_says_so() -> None:
    with running_broker([queue("orders")]) as broker:
        spec = ClientSpec(broker.connection_string, "orders", "no-such-replies", orders=1, seed=1)
        client = ClientProcess(spec)
        try:
            await client.start()
            error = await failure_of(client)
        finally:
            await client.close()

    assert "exited with code 1" in str(error)


async def failure_of(client: ClientProcess) -> RuntimeError:
    deadline = time.monotonic() + BOUND_SECONDS
    while time.monotonic() < deadline:
        try:
            client.check()
        except RuntimeError as error:
            return error
        await asyncio.sleep(0.05)
    raise AssertionError(f"the client process did not fail within {BOUND_SECONDS:.0f}s")
