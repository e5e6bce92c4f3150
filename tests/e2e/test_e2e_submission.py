"""Submission through the real pipeline (S1-S4, C5, C6, R1): duplicates, conflicts, invalid
messages, and the backlog bound.

The service layer's rules over SQLite are tested in tests/integration/stores; these tests send
real messages to the embedded broker and watch what the app's Service Bus trigger, stores and
replies do with them.
"""

import asyncio
import json
from pathlib import Path

from azure.servicebus.amqp import AmqpAnnotatedMessage
from devhost.telemetry import EXPORT_SETTING
from devhost.testing import eventually

from domain.records import ProcessState
from observability.metrics import (
    BACKLOG_UNFINISHED,
    ORDERS_RECEIVED,
    ORDERS_REJECTED,
    REJECTED_BACKLOG_FULL,
)
from tests.e2e.e2e_helpers import (
    AGENT_REQUESTS,
    AGENT_RESPONSES,
    ALERTS,
    ORDERS,
    REPLIES,
    STEP_SERVICES,
    Delivered,
    order_body,
    running_pipeline,
)
from tools.demo.metrics import read as read_metrics
from tools.simulators.services.faults import FaultKind, FaultPlan, FaultRule


async def test_s2_the_same_order_sent_twice_is_one_order_received_once(tmp_path: Path) -> None:
    """S2, C6, R2: a resubmission with the same data (a new message id, so the broker's
    duplicate detection does not hide it) is accepted again without a second order, record
    or attempt, and its second `received` reply is removed by duplicate detection; the app
    hears each step's progress and the completion once, and each step's service acts once."""
    async with running_pipeline(tmp_path) as e2e:
        await e2e.submit(order_body("o-twice"), message_id="o-twice")
        await e2e.statuses("o-twice", "received")
        await e2e.submit(order_body("o-twice"), message_id="o-twice-resent")
        await e2e.drained(ORDERS, "the resubmission was accepted")

        later = await e2e.statuses("o-twice", "completed")

        assert [(m.body["status"], m.body["step"]) for m in later] == [
            ("in-progress", "reserve-stock"),
            ("in-progress", "charge-payment"),
            ("in-progress", "ship-order"),
            ("completed", None),
        ]
        # The client may hear `completed` before the app's sender has counted it.
        await eventually(
            lambda: e2e.app_sent()[REPLIES] == 6,
            "`received` twice, three `in-progress` and `completed` sent",
        )
        assert await e2e.pending(REPLIES) == []
        record = await e2e.record("o-twice")
        assert record is not None
        assert (record.process_state, record.attempt, record.failure_count) == (
            ProcessState.PROCESSED,
            1,
            0,
        )
        assert await e2e.instance("o-twice:2") is None
        for service in STEP_SERVICES:
            assert len(e2e.pipeline.services.ledger_entries(service, "o-twice")) == 1
        assert await e2e.pending(ORDERS, dead_letters=True) == []


async def test_s3_a_conflicting_order_is_dead_lettered_and_alerted(tmp_path: Path) -> None:
    """S3: the same OrderID with different items goes to the dead-letter queue of `orders`
    with reason OrderConflict and a description, an operator gets an `order-conflict` alert,
    and the stored order keeps its first data."""
    async with running_pipeline(tmp_path) as e2e:
        await e2e.submit(order_body("o-conflict", items=[("sku-1", 2)]), message_id="first")
        await e2e.statuses("o-conflict", "completed")

        await e2e.submit(order_body("o-conflict", items=[("sku-9", 5)]), message_id="second")

        [dead] = await e2e.count_of(ORDERS, 1, dead_letters=True)
        assert dead.message_id == "second"
        assert dead.dead_letter_reason == "OrderConflict"
        assert dead.dead_letter_description is not None
        assert "o-conflict" in dead.dead_letter_description
        assert "items" in dead.dead_letter_description
        [alert] = await e2e.count_of(ALERTS, 1)
        assert alert.body["kind"] == "order-conflict"
        assert alert.body["orderId"] == "o-conflict"
        assert "items" in alert.body["reason"]
        stored = await e2e.stored_order("o-conflict")
        assert stored is not None
        assert stored.immutable_data()["items"] == [{"sku": "sku-1", "quantity": 2}]
        record = await e2e.record("o-conflict")
        assert record is not None
        assert (record.process_state, record.attempt) == (ProcessState.PROCESSED, 1)
        assert await e2e.pending(REPLIES) == [], "a conflicting message gets no status reply"


async def test_s3_a_conflict_sent_with_the_recommended_message_id_is_not_silently_lost(
    tmp_path: Path,
) -> None:
    """S3 with the message id contracts.md recommends (the orderId): the conflicting
    resubmission must still end on the dead-letter queue with an operator alert. So the
    orders queue has no duplicate detection: it would drop the resubmission unseen, and S2
    already makes an exact resend harmless."""
    async with running_pipeline(tmp_path) as e2e:
        await e2e.submit(order_body("o-same-id", items=[("sku-1", 2)]), message_id="o-same-id")
        await e2e.statuses("o-same-id", "received")

        await e2e.submit(order_body("o-same-id", items=[("sku-9", 5)]), message_id="o-same-id")
        await e2e.drained(ORDERS, "the conflicting resubmission was handled")

        dead = await e2e.pending(ORDERS, dead_letters=True)
        assert [m.dead_letter_reason for m in dead] == ["OrderConflict"]


async def test_invalid_messages_are_dead_lettered_with_what_is_wrong(tmp_path: Path) -> None:
    """contracts.md, S3, R1: not JSON, a schema break, an unknown schemaVersion and a reply_to
    outside REPLY_QUEUES are each dead-lettered with a reason saying what is wrong, raise an
    `invalid-message` alert, and never reach the stores."""
    async with running_pipeline(tmp_path) as e2e:
        await e2e.submit(b"{not json", message_id="not-json")
        await e2e.submit(order_body("o-schema", items=[("sku-1", 0)]), message_id="schema")
        await e2e.submit(order_body("o-version", schema_version=2), message_id="version")
        await e2e.submit(
            order_body("o-reply"), message_id="reply-to", reply_to="someone-elses-queue"
        )
        await e2e.submit(order_body("o-huge", schema_version="v" * 60_000), message_id="huge")
        personal = json.loads(order_body("o-personal"))
        personal["customerId"] = {"name": "Ada Lovelace", "email": "ada@example.com"}
        await e2e.submit(json.dumps(personal), message_id="personal")

        dead = await e2e.count_of(ORDERS, 6, dead_letters=True)

        why = {m.message_id: m.dead_letter_description or "" for m in dead}
        assert {m.dead_letter_reason for m in dead} == {"InvalidMessage"}
        assert "not valid JSON" in why["not-json"]
        assert "items[0].quantity" in why["schema"]
        assert "schemaVersion 2" in why["version"]
        assert "REPLY_QUEUES" in why["reply-to"]
        assert "schemaVersion a string of 60000 characters" in why["huge"]
        assert "customerId must be a string, got an object" in why["personal"]
        # A reason names the field and what is wrong, never what the sender put there (C3).
        for secret in ("someone-elses-queue", "vvvv", "Ada", "ada@example.com"):
            assert all(secret not in reason for reason in why.values()), secret
        assert all(len(reason) <= 4096 for reason in why.values())
        alerts = await e2e.count_of(ALERTS, 6)
        assert not any("ada@example.com" in a.raw.decode() for a in alerts)
        assert {a.body["kind"] for a in alerts} == {"invalid-message"}
        for order_id in ("o-schema", "o-version", "o-reply"):
            assert await e2e.record(order_id) is None
            assert await e2e.stored_order(order_id) is None
        assert await e2e.pending(REPLIES) == []


async def test_s3_a_body_in_an_amqp_value_or_sequence_section_is_dead_lettered_at_once(
    tmp_path: Path,
) -> None:
    """A client that sends its order as an AMQP value or sequence section sent no UTF-8 JSON
    data: on its first delivery the message is dead-lettered with a reason naming the
    section, and an operator is alerted, instead of failing until MaxDeliveryCount."""
    async with running_pipeline(tmp_path) as e2e:
        value = AmqpAnnotatedMessage(
            value_body={"orderId": "o-value"}, properties={"message_id": "value"}
        )
        sequence = AmqpAnnotatedMessage(sequence_body=[[1]], properties={"message_id": "sequence"})
        await e2e.send_amqp(ORDERS, value)
        await e2e.send_amqp(ORDERS, sequence)

        dead = await e2e.count_of(ORDERS, 2, dead_letters=True)

        assert {m.message_id: m.dead_letter_reason for m in dead} == {
            "value": "InvalidMessage",
            "sequence": "InvalidMessage",
        }
        why = {m.message_id: m.dead_letter_description or "" for m in dead}
        assert "the body is an AMQP value section, not a data section" in why["value"]
        # The Service Bus extension's own decoding hands a sequence section over as a value.
        assert "section, not a data section" in why["sequence"]
        alerts = await e2e.count_of(ALERTS, 2)
        assert {a.body["kind"] for a in alerts} == {"invalid-message"}
        assert await e2e.record("o-value") is None


async def test_r1_only_allow_listed_reply_queues_get_status_messages(tmp_path: Path) -> None:
    """R1, R2: with REPLY_QUEUES naming another app's queue, an order that names
    `demo-replies` is refused at submission and that queue gets nothing; an order without a
    reply_to is processed to the end, every step, and no status message goes anywhere."""
    async with running_pipeline(tmp_path, settings={"REPLY_QUEUES": "partner-replies"}) as e2e:
        await e2e.submit(order_body("o-not-listed"), message_id="o-not-listed")
        await e2e.submit(order_body("o-silent"), message_id="o-silent", reply_to=None)

        [refused] = await e2e.count_of(ORDERS, 1, dead_letters=True)
        done = await e2e.wait_for_record(
            "o-silent", lambda r: r.process_state is ProcessState.PROCESSED, "Processed"
        )

        assert refused.message_id == "o-not-listed"
        assert "reply_to is not an allow-listed reply queue" in (
            refused.dead_letter_description or ""
        )
        assert await e2e.record("o-not-listed") is None
        assert done.reply_to is None
        for service in STEP_SERVICES:
            assert len(e2e.pipeline.services.ledger_entries(service, "o-silent")) == 1
        assert await e2e.pending(REPLIES) == []
        assert set(e2e.app_sent()) <= {*AGENT_REQUESTS, AGENT_RESPONSES, ALERTS}, (
            "no status message was sent to any queue"
        )


async def test_c5_a_slow_downstream_keeps_the_backlog_bounded_and_the_excess_is_rejected(
    tmp_path: Path,
) -> None:
    """C5: while the stock service takes 2 s per reservation, a burst of 10 orders meets a
    backlog bound of 4 (2 running): the state store never holds more than 4 unfinished
    orders nor more than 2 running ones, each order is answered either `received` or
    `rejected` (which says why), a rejected order is stored nowhere and its message is
    completed, not dead-lettered, and every accepted order completes. Once the backlog
    drains, a rejected order sent again is accepted. C9: the app runs in a language worker
    that exports its metrics to the telemetry file; its rejected counter equals the
    `rejected` replies, by reason."""
    slow_stock = FaultPlan(
        rules=(FaultRule(FaultKind.LATENCY, operation="reserve", delay_seconds=2),)
    )
    telemetry = tmp_path / "telemetry.jsonl"
    bounds = {
        "MAX_RUNNING_ORDERS": "2",
        "MAX_BACKLOG_ORDERS": "4",
        EXPORT_SETTING: str(telemetry),
    }
    order_ids = [f"o-burst-{index:02d}" for index in range(10)]

    def answered(taken: list[Delivered]) -> bool:
        final = {(m.body["orderId"], m.body["status"]) for m in taken}
        return all(
            (order_id, "rejected") in final or (order_id, "completed") in final
            for order_id in order_ids
        )

    async with running_pipeline(
        tmp_path, service_faults={"stock": slow_stock}, settings=bounds, worker_processes=1
    ) as e2e:
        async with e2e.watching_backlog() as backlog:
            for order_id in order_ids:
                await e2e.submit(order_body(order_id), message_id=order_id)
            replies = await e2e.receive(
                REPLIES, until=answered, what="`completed` or `rejected` for every order"
            )
            await e2e.drained(ORDERS, "every submission settled")

        statuses = {
            order_id: [m.body for m in replies if m.body["orderId"] == order_id]
            for order_id in order_ids
        }
        rejected = sorted(o for o, bodies in statuses.items() if bodies[0]["status"] == "rejected")
        accepted = sorted(set(order_ids) - set(rejected))
        assert rejected, f"no order was rejected; the backlog went {backlog}"
        # The first four fill the backlog; a place frees only when an order completes.
        assert len(accepted) >= 4, statuses
        assert max(sample.unfinished for sample in backlog) <= 4, f"the backlog went {backlog}"
        # The starter claims no more than the cap: the other accepted orders wait Pending.
        running = max(sample.running for sample in backlog)
        assert 1 <= running <= 2, f"the backlog went {backlog}"
        for order_id in rejected:
            [rejection] = statuses[order_id]
            assert rejection["reason"].startswith("backlog at its bound: 4 of at most 4 orders")
            assert rejection["attempt"] is None
            assert await e2e.record(order_id) is None
            assert await e2e.stored_order(order_id) is None
        for order_id in accepted:
            bodies = statuses[order_id]
            assert (bodies[0]["status"], bodies[-1]["status"]) == ("received", "completed")
            record = await e2e.record(order_id)
            assert record is not None
            assert record.process_state is ProcessState.PROCESSED
        assert await e2e.pending(ORDERS, dead_letters=True) == []
        assert await e2e.pending(ALERTS) == []

        again = rejected[0]
        await e2e.submit(order_body(again), message_id=f"{again}-again")
        later = await e2e.statuses(again, "completed")
        assert later[0].body["status"] == "received"
        record = await e2e.record(again)
        assert record is not None
        assert record.process_state is ProcessState.PROCESSED

    # Leaving the pipeline stopped the worker, which flushed its metrics to the file.
    exported = await asyncio.to_thread(read_metrics, telemetry)
    assert exported.processes >= 1
    rejected_replies = [m for m in replies if m.body["status"] == "rejected"]
    assert exported.by(ORDERS_REJECTED, "reason") == {REJECTED_BACKLOG_FULL: len(rejected_replies)}
    assert exported.total(ORDERS_RECEIVED) == len(accepted) + 1
    unfinished = exported.gauge(BACKLOG_UNFINISHED)["max"]
    assert unfinished is not None
    assert unfinished <= 4
