"""What the repository's queues (servicebus.config.json, which infra/ deploys as is) do with
a message nobody takes, on the local broker's queue model and a virtual clock (S1, S3, R2)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from devhost.servicebus.config import parse_config
from devhost.servicebus.entities import Namespace
from devhost.testing import BrokerClock

from config import Settings

ROOT = Path(__file__).resolve().parents[3]
CONFIG = parse_config(json.loads((ROOT / "servicebus.config.json").read_text(encoding="utf-8")))
SAMPLE = json.loads((ROOT / "local.settings.sample.json").read_text(encoding="utf-8"))["Values"]
SETTINGS = Settings.from_environ({name: str(value) for name, value in SAMPLE.items()})
A_MONTH_MS = int(timedelta(days=30).total_seconds() * 1000)
A_MINUTE_MS = 60_000


@pytest.fixture
def clock() -> BrokerClock:
    return BrokerClock()


def waiting(namespace: Namespace, queue: str) -> int:
    return len(namespace.queue(queue).peek(1, 100))


@pytest.mark.parametrize("queue", sorted(set(SETTINGS.consumed_queues)))
def test_work_the_app_consumes_waits_a_month_for_it_s1(clock: BrokerClock, queue: str) -> None:
    """An app that is down for a month still finds its submissions and agent messages: none of
    the queues it consumes expires a message on its own (their deadlines are the
    orchestrator's, E6)."""
    namespace = Namespace(CONFIG, clock=clock)
    namespace.queue(queue).enqueue(
        b"{}", message_id="m-1", time_to_live_ms=None, scheduled_for=None
    )

    clock.tick(A_MONTH_MS)
    namespace.advance()

    assert waiting(namespace, queue) == 1


def test_an_order_past_its_own_time_to_live_is_dead_lettered_not_dropped_s3(
    clock: BrokerClock,
) -> None:
    """A client may give its order a time to live; once it passes, the order lands in the
    dead-letter sub-queue, where the watcher alerts an operator, instead of vanishing."""
    namespace = Namespace(CONFIG, clock=clock)
    orders = SETTINGS.orders_queue
    namespace.queue(orders).enqueue(
        b"{}", message_id="order-1", time_to_live_ms=A_MINUTE_MS, scheduled_for=None
    )

    clock.tick(A_MINUTE_MS)
    namespace.advance()

    assert waiting(namespace, orders) == 0
    [dead] = namespace.queue(f"{orders}/$deadletterqueue").peek(1, 10)
    assert dead.message_id == "order-1"
    assert dead.dead_letter_reason == "TTLExpiredException"


@pytest.mark.parametrize("queue", sorted(SETTINGS.reply_queues))
def test_status_messages_nobody_reads_leave_the_reply_queue_r2(
    clock: BrokerClock, queue: str
) -> None:
    """A client that stops reading cannot fill its reply queue (and so make the app's status
    sends fail): an unread status message expires after two weeks, and leaves no dead letter
    behind, which would count towards the same queue size."""
    namespace = Namespace(CONFIG, clock=clock)
    namespace.queue(queue).enqueue(
        b"{}", message_id="order-1:received:1", time_to_live_ms=None, scheduled_for=None
    )

    clock.tick(int(timedelta(days=14).total_seconds() * 1000) - 1)
    namespace.advance()
    assert waiting(namespace, queue) == 1

    clock.tick(1)
    namespace.advance()
    assert waiting(namespace, queue) == 0
    assert waiting(namespace, f"{queue}/$deadletterqueue") == 0
