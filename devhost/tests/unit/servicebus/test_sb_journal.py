"""Durability of the queue model through SqliteJournal.

A crash is simulated by dropping a Namespace without close() and recovering a new one from the
same file; one test kills a real process with SIGKILL in the middle of its work.
"""

from __future__ import annotations

import logging
import signal
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from devhost_tests_support import TESTS_ROOT

from devhost.servicebus.config import BrokerConfig, QueueSettings
from devhost.servicebus.entities import BrokerMessage, MessageState, Namespace, Queue
from devhost.servicebus.journal import JournalError, SqliteJournal

if TYPE_CHECKING:
    from devhost_tests_support.broker_model import MakeNamespace

    from devhost.testing import BrokerClock

RECEIVER = "receiver-link"


def send(queue: Queue, payload: bytes, **options: int | str) -> BrokerMessage:
    message = queue.enqueue(
        payload,
        message_id=str(options["message_id"]) if "message_id" in options else None,
        time_to_live_ms=int(options["ttl_ms"]) if "ttl_ms" in options else None,
        scheduled_for=int(options["scheduled_for"]) if "scheduled_for" in options else None,
    )
    assert message is not None
    return message


def lock(queue: Queue) -> uuid.UUID:
    message = queue.lock_next(RECEIVER)
    assert message is not None
    assert message.lock_token is not None
    return message.lock_token


def summary(queue: Queue) -> list[tuple[int, bytes, MessageState, int]]:
    return [(m.sequence_number, m.payload, m.state, m.delivery_count) for m in queue.peek(1, 1000)]


def test_every_accepted_message_survives_a_crash(
    tmp_path: Path, make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    data = tmp_path / "broker.sqlite"
    before = make_namespace(journal=SqliteJournal(data))
    queue = before.queue("orders")
    send(queue, b"active")
    send(queue, b"abandoned")
    send(queue, b"deferred")
    send(queue, b"dead")
    scheduled = send(queue, b"scheduled", scheduled_for=clock.now + 60_000)
    send(queue, b"completed")
    send(queue, b"locked at the crash")
    lock(queue)
    abandoned = lock(queue)
    queue.abandon(abandoned)
    lock(queue)
    queue.defer(lock(queue))
    queue.dead_letter(lock(queue), "Unprocessable", "bad shape")
    queue.complete(lock(queue))
    lock(queue)

    # `before` stays open and is never closed: like a crashed process, it never checkpoints.
    after = make_namespace(journal=SqliteJournal(data))

    recovered = after.queue("orders")
    assert summary(recovered) == [
        (1, b"active", MessageState.ACTIVE, 0),
        (2, b"abandoned", MessageState.ACTIVE, 1),
        (3, b"deferred", MessageState.DEFERRED, 0),
        (5, b"scheduled", MessageState.SCHEDULED, 0),
        (7, b"locked at the crash", MessageState.ACTIVE, 0),
    ]
    [dead] = after.queue("orders/$deadletterqueue").peek(1, 10)
    assert (dead.sequence_number, dead.payload) == (4, b"dead")
    assert (dead.dead_letter_reason, dead.dead_letter_description) == ("Unprocessable", "bad shape")
    assert dead.dead_letter_source == "orders"
    assert recovered.active_count() == 3
    assert after.take_ready() >= {recovered}
    assert after.next_due() == scheduled.scheduled_for
    assert send(recovered, b"next").sequence_number == 8


def test_recovered_messages_keep_their_times_and_ids(
    tmp_path: Path, make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    data = tmp_path / "broker.sqlite"
    queue = make_namespace(journal=SqliteJournal(data)).queue("orders")
    original = send(queue, b"\x00\xffpayload", message_id="m-1", ttl_ms=60_000)

    [recovered] = make_namespace(journal=SqliteJournal(data)).queue("orders").peek(1, 1)

    assert recovered == original


def test_locks_held_at_a_crash_are_released_without_counting(
    tmp_path: Path, make_namespace: MakeNamespace
) -> None:
    data = tmp_path / "broker.sqlite"
    queue = make_namespace(journal=SqliteJournal(data)).queue("orders")
    send(queue, b"x")
    queue.abandon(lock(queue))
    lock(queue)

    recovered = make_namespace(journal=SqliteJournal(data)).queue("orders")

    message = recovered.lock_next(RECEIVER)
    assert message is not None
    assert message.delivery_count == 1


def test_sequence_numbers_continue_after_recovery_even_with_an_empty_queue(
    tmp_path: Path, make_namespace: MakeNamespace
) -> None:
    data = tmp_path / "broker.sqlite"
    queue = make_namespace(journal=SqliteJournal(data)).queue("orders")
    for _ in range(3):
        send(queue, b"x")
        queue.complete(lock(queue))

    recovered = make_namespace(journal=SqliteJournal(data)).queue("orders")

    assert send(recovered, b"y").sequence_number == 4


def test_duplicate_detection_history_survives_recovery(
    tmp_path: Path, make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    data = tmp_path / "broker.sqlite"
    settings = {
        "requires_duplicate_detection": True,
        "duplicate_detection_window": timedelta(minutes=1),
    }
    queue = make_namespace(journal=SqliteJournal(data), **settings).queue("orders")
    send(queue, b"x", message_id="order-1")
    queue.complete(lock(queue))
    clock.tick(30_000)

    recovered = make_namespace(journal=SqliteJournal(data), **settings).queue("orders")

    duplicate = recovered.enqueue(
        b"again", message_id="order-1", time_to_live_ms=None, scheduled_for=None
    )
    assert duplicate is None
    clock.tick(30_000)
    assert send(recovered, b"later", message_id="order-1").sequence_number == 2


def test_forgotten_duplicate_history_is_not_resurrected(
    tmp_path: Path, make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    data = tmp_path / "broker.sqlite"
    settings = {
        "requires_duplicate_detection": True,
        "duplicate_detection_window": timedelta(seconds=10),
    }
    queue = make_namespace(journal=SqliteJournal(data), **settings).queue("orders")
    send(queue, b"x", message_id="old")
    clock.tick(10_000)
    send(queue, b"y", message_id="new")

    rows = sqlite3.connect(data).execute("SELECT message_id FROM duplicate_history").fetchall()

    assert rows == [("new",)]


def test_work_that_fell_due_while_down_is_done_at_recovery(
    tmp_path: Path, make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    data = tmp_path / "broker.sqlite"
    settings = {"dead_lettering_on_message_expiration": True}
    queue = make_namespace(journal=SqliteJournal(data), **settings).queue("orders")
    send(queue, b"scheduled", scheduled_for=clock.now + 1_000)
    send(queue, b"expiring", ttl_ms=1_000)
    clock.tick(5_000)

    after = make_namespace(journal=SqliteJournal(data), **settings)

    assert [m.payload for m in after.queue("orders").peek(1, 10)] == [b"scheduled"]
    assert after.queue("orders").active_count() == 1
    [dead] = after.queue("orders/$deadletterqueue").peek(1, 10)
    assert dead.dead_letter_reason == "TTLExpiredException"
    assert after.next_due() is None


def test_a_scheduled_message_activated_before_the_crash_stays_receivable(
    tmp_path: Path, make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    data = tmp_path / "broker.sqlite"
    before = make_namespace(journal=SqliteJournal(data))
    send(before.queue("orders"), b"scheduled", scheduled_for=clock.now + 1_000)
    clock.tick(1_000)
    before.advance()
    queue = before.queue("orders")
    queue.abandon(lock(queue))

    after = make_namespace(journal=SqliteJournal(data)).queue("orders")

    assert summary(after) == [(1, b"scheduled", MessageState.ACTIVE, 1)]


def test_messages_of_a_queue_no_longer_configured_are_kept_but_not_loaded(
    tmp_path: Path, clock: BrokerClock, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "broker.sqlite"
    both = BrokerConfig(
        namespace="ns", queues={"a": QueueSettings(name="a"), "b": QueueSettings(name="b")}
    )
    send(Namespace(both, clock=clock, journal=SqliteJournal(data)).queue("b"), b"kept")
    only_a = BrokerConfig(namespace="ns", queues={"a": QueueSettings(name="a")})

    with caplog.at_level(logging.WARNING):
        Namespace(only_a, clock=clock, journal=SqliteJournal(data))
    again = Namespace(both, clock=clock, journal=SqliteJournal(data))

    assert "entity=b" in caplog.text
    assert [m.payload for m in again.queue("b").peek(1, 10)] == [b"kept"]


def test_auto_created_queues_come_back_with_their_messages(
    tmp_path: Path, make_namespace: MakeNamespace
) -> None:
    data = tmp_path / "broker.sqlite"
    send(make_namespace(journal=SqliteJournal(data), auto_create=True).queue("fresh"), b"x")

    recovered = make_namespace(journal=SqliteJournal(data), auto_create=True)

    assert [m.payload for m in recovered.queue("fresh").peek(1, 10)] == [b"x"]


def test_a_file_that_is_not_a_journal_is_refused_with_the_path(tmp_path: Path) -> None:
    data = tmp_path / "notes.txt"
    data.write_bytes(b"these are not the messages you are looking for" * 100)

    with pytest.raises(JournalError, match=str(data)):
        SqliteJournal(data)


def test_a_journal_from_another_schema_version_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "broker.sqlite"
    with sqlite3.connect(data) as db:
        db.execute("PRAGMA user_version = 99")

    with pytest.raises(JournalError, match="schema version 99"):
        SqliteJournal(data)


def test_close_is_idempotent_and_keeps_the_data(
    tmp_path: Path, make_namespace: MakeNamespace
) -> None:
    data = tmp_path / "broker.sqlite"
    namespace = make_namespace(journal=SqliteJournal(data))
    send(namespace.queue("orders"), b"x")

    namespace.close()
    namespace.close()

    assert len(make_namespace(journal=SqliteJournal(data)).queue("orders").peek(1, 10)) == 1


_KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from devhost.servicebus.config import BrokerConfig, QueueSettings
    from devhost.servicebus.entities import Namespace
    from devhost.servicebus.journal import SqliteJournal

    config = BrokerConfig(namespace="ns", queues={"orders": QueueSettings(name="orders")})
    queue = Namespace(config, journal=SqliteJournal(sys.argv[1])).queue("orders")
    for n in range(200):
        queue.enqueue(b"m%d" % n, message_id=None, time_to_live_ms=None, scheduled_for=None)
    for _ in range(50):
        queue.complete(queue.lock_next("link").lock_token)
    queue.lock_next("link")
    print("acknowledged", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_acknowledged_work_survives_a_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "broker.sqlite"
    result = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=TESTS_ROOT,
        check=False,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert result.stdout.strip() == "acknowledged"

    config = BrokerConfig(namespace="ns", queues={"orders": QueueSettings(name="orders")})
    queue = Namespace(config, journal=SqliteJournal(data)).queue("orders")

    remaining = queue.peek(1, 1000)
    assert [m.sequence_number for m in remaining] == list(range(51, 201))
    assert queue.active_count() == 150
