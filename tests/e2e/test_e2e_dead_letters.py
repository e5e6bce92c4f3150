"""Dead letters through the real pipeline (S3, E8, DLQ with metadata for triage): the
dead-letter watcher raises one operator alert per dead letter of the queues the app
consumes - a conflicting submission (S3) and a submission that exhausted its deliveries -
and never twice; an operator triages them through the service layer the console uses: a
resubmitted conflict is processed by the app again (and conflicts again), then discarded.

The watcher's timer does not fire on its own in the e2e pipeline (`QUIET_TIMERS`); the
test runs it when it wants, as the Functions host's admin endpoint does (`DevHost.invoke`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from azure.functions.timer import TimerRequest
from devhost.testing import eventually_true

import bootstrap
from domain.dead_letters import MAX_DELIVERY_COUNT_EXCEEDED
from services.dead_letters import discard_dead_letter, list_dead_letters, resubmit_dead_letter
from tests.e2e.e2e_helpers import ALERTS, E2E, ORDERS, REPLIES, order_body, running_pipeline

GONE_REPLIES = "gone-replies"
"""On REPLY_QUEUES, yet no such queue exists: every delivery of a submission naming it fails
when it sends the `received` status, until the broker dead-letters it (MaxDeliveryCount)."""

SETTINGS = {"REPLY_QUEUES": f"{REPLIES},{GONE_REPLIES}"}


async def watch(e2e: E2E) -> None:
    await e2e.pipeline.host.invoke("watch_dead_letter_queues", TimerRequest(past_due=False))


async def dead_letter_alerts(e2e: E2E) -> list[dict[str, object]]:
    return [m.body for m in await e2e.peek(ALERTS) if m.body["kind"] == "dead-letter"]


async def test_s3_a_conflict_and_an_exhausted_submission_each_raise_one_dead_letter_alert(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_pipeline(tmp_path, settings=SETTINGS) as e2e:
        await e2e.submit(order_body("o-conflict", items=[("sku-1", 2)]), message_id="first")
        await e2e.statuses("o-conflict", "received")
        await e2e.submit(order_body("o-conflict", items=[("sku-9", 5)]), message_id="second")
        await e2e.submit(order_body("o-exhausted"), message_id="o-exhausted", reply_to=GONE_REPLIES)

        async def both_dead_lettered() -> bool:
            return len(await e2e.peek(ORDERS, dead_letters=True)) == 2

        await eventually_true(both_dead_lettered, "the conflict and the exhausted submission")

        with caplog.at_level(logging.WARNING, logger="app.dead_letters"):
            await watch(e2e)
            await watch(e2e)

        alerts = await dead_letter_alerts(e2e)
        assert sorted((a["orderId"], a["deadLetterReason"], a["queue"]) for a in alerts) == [
            ("o-conflict", "OrderConflict", ORDERS),
            ("o-exhausted", MAX_DELIVERY_COUNT_EXCEEDED, ORDERS),
        ]
        lines = [
            r.getMessage()
            for r in caplog.records
            if "operator alert: dead letter" in r.getMessage()
        ]
        assert len(lines) == 2, "one alert per dead letter, the second run alerts nothing"
        assert any(
            "order.id=o-exhausted" in line and MAX_DELIVERY_COUNT_EXCEEDED in line for line in lines
        )
        assert not any("c-1" in line for line in lines), "no customer id in an alert"

        # The operator resubmits the conflict through the console's service layer: the app
        # processes the copy, finds the same conflict and dead-letters it again - a new dead
        # letter, alerted once. Then the operator discards it; the watcher stays quiet.
        consumed = bootstrap.services().settings.consumed_queues
        queues = bootstrap.dead_letter_queues()
        letters = await list_dead_letters(queues, ORDERS, consumed=consumed)
        conflict = next(d for d in letters if d.order_id == "o-conflict")
        assert conflict.description is not None
        assert "items" in conflict.description
        assert await resubmit_dead_letter(
            queues, ORDERS, conflict.sequence_number, consumed=consumed
        )

        async def conflict_dead_lettered_again() -> bool:
            again = await list_dead_letters(queues, ORDERS, consumed=consumed)
            return any(d.sequence_number > conflict.sequence_number for d in again)

        await eventually_true(conflict_dead_lettered_again, "the resubmitted conflict processed")
        await watch(e2e)
        [again] = [
            a
            for a in await dead_letter_alerts(e2e)
            if a["sequenceNumber"] != conflict.sequence_number and a["orderId"] == "o-conflict"
        ]
        assert again["messageId"] == f"second:resubmitted:{conflict.sequence_number}"
        assert again["deadLetterReason"] == "OrderConflict"

        assert await discard_dead_letter(
            queues, ORDERS, int(str(again["sequenceNumber"])), consumed=consumed
        )
        await watch(e2e)
        assert len(await dead_letter_alerts(e2e)) == 3
        assert [d.order_id for d in await list_dead_letters(queues, ORDERS, consumed=consumed)] == [
            "o-exhausted"
        ]
