"""The broker's queue model, driven by a virtual clock: no sleeping, no wire."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from devhost.servicebus.config import BrokerConfig, QueueSettings
from devhost.servicebus.entities import (
    BrokerMessage,
    EntityNotFound,
    InvalidOperation,
    LockLost,
    MessageNotFound,
    MessageState,
    Namespace,
    Queue,
)

if TYPE_CHECKING:
    from devhost_tests_support.broker_model import MakeNamespace

    from devhost.testing import BrokerClock

LOCK_MS = 30_000
RECEIVER = "receiver-link"


def send(
    queue: Queue,
    payload: bytes = b"body",
    *,
    message_id: str | None = None,
    ttl_ms: int | None = None,
    scheduled_for: int | None = None,
) -> BrokerMessage:
    message = queue.enqueue(
        payload, message_id=message_id, time_to_live_ms=ttl_ms, scheduled_for=scheduled_for
    )
    assert message is not None, "the message was unexpectedly dropped as a duplicate"
    return message


def lock(queue: Queue, holder: str = RECEIVER) -> BrokerMessage:
    message = queue.lock_next(holder)
    assert message is not None, f"no message available on {queue.name}"
    assert message.lock_token is not None
    return message


def token(message: BrokerMessage) -> uuid.UUID:
    assert message.lock_token is not None
    return message.lock_token


def drain_payloads(queue: Queue) -> list[bytes]:
    payloads = []
    while (message := queue.receive_and_delete_next()) is not None:
        payloads.append(message.payload)
    return payloads


# -- sequence numbers and order -------------------------------------------------------------


def test_sequence_numbers_start_at_one_and_increase_per_queue(clock: BrokerClock) -> None:
    config = BrokerConfig(
        namespace="ns",
        queues={"a": QueueSettings(name="a"), "b": QueueSettings(name="b")},
    )
    namespace = Namespace(config, clock=clock)
    a, b = namespace.queue("a"), namespace.queue("b")

    assert [send(a).sequence_number for _ in range(3)] == [1, 2, 3]
    assert send(b).sequence_number == 1


def test_sequence_numbers_are_not_reused_after_messages_leave(
    make_namespace: MakeNamespace,
) -> None:
    queue = make_namespace().queue("orders")
    send(queue)
    queue.complete(token(lock(queue)))

    assert send(queue).sequence_number == 2


def test_messages_are_received_in_sequence_order(make_namespace: MakeNamespace) -> None:
    queue = make_namespace().queue("orders")
    for payload in (b"1", b"2", b"3"):
        send(queue, payload)

    assert drain_payloads(queue) == [b"1", b"2", b"3"]


def test_an_abandoned_message_goes_back_to_its_sequence_position(
    make_namespace: MakeNamespace,
) -> None:
    queue = make_namespace().queue("orders")
    for payload in (b"1", b"2", b"3"):
        send(queue, payload)
    first = lock(queue)
    second = lock(queue)

    queue.abandon(token(second))
    queue.abandon(token(first))

    assert drain_payloads(queue) == [b"1", b"2", b"3"]


def test_active_count_counts_only_receivable_messages(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    queue = make_namespace().queue("orders")
    send(queue)
    send(queue)
    send(queue, scheduled_for=clock.now + 60_000)
    deferred = lock(queue)
    queue.defer(token(deferred))
    lock(queue)

    assert queue.active_count() == 0
    send(queue)
    assert queue.active_count() == 1


# -- peek-lock ------------------------------------------------------------------------------


def test_a_lock_lasts_the_queues_lock_duration(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    queue = make_namespace(lock_duration=timedelta(seconds=45)).queue("orders")
    send(queue)

    message = lock(queue, holder="link-1")

    assert message.locked_until == clock.now + 45_000
    assert message.holder == "link-1"
    assert queue.lock_next(RECEIVER) is None


def test_complete_removes_the_message(make_namespace: MakeNamespace) -> None:
    queue = make_namespace().queue("orders")
    send(queue)

    queue.complete(token(lock(queue)))

    assert queue.peek(1, 10) == []
    assert queue.lock_next(RECEIVER) is None


def test_settling_with_an_unknown_or_settled_token_loses_the_lock(
    make_namespace: MakeNamespace,
) -> None:
    queue = make_namespace().queue("orders")
    send(queue)
    message_token = token(lock(queue))
    queue.complete(message_token)

    with pytest.raises(LockLost, match="lock supplied is invalid"):
        queue.complete(message_token)
    with pytest.raises(LockLost):
        queue.abandon(uuid.uuid4())


@pytest.mark.parametrize("settle", ["complete", "abandon", "defer", "release", "renew_lock"])
def test_an_expired_lock_is_lost_even_before_advance_runs(
    make_namespace: MakeNamespace, clock: BrokerClock, settle: str
) -> None:
    queue = make_namespace().queue("orders")
    send(queue)
    message = lock(queue)
    clock.tick(LOCK_MS)

    with pytest.raises(LockLost, match="expired"):
        getattr(queue, settle)(token(message))

    again = lock(queue)
    assert again.sequence_number == message.sequence_number
    assert again.delivery_count == 1


def test_renewing_extends_the_lock_from_now(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    send(queue)
    message = lock(queue)
    clock.tick(20_000)

    locked_until = queue.renew_lock(token(message))
    clock.tick(20_000)
    namespace.advance()

    assert locked_until == clock.now - 20_000 + LOCK_MS
    assert namespace.next_due() == locked_until
    queue.complete(token(message))
    assert namespace.next_due() is None


def test_lock_expiry_makes_the_message_available_again_counted(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    send(queue)
    message = lock(queue)
    first_token = token(message)
    namespace.take_ready()
    assert namespace.next_due() == message.locked_until

    clock.tick(LOCK_MS)
    namespace.advance()

    assert message.lock_token is None
    assert namespace.take_ready() == {queue}
    redelivered = lock(queue)
    assert redelivered.delivery_count == 1
    assert token(redelivered) != first_token
    with pytest.raises(LockLost):
        queue.complete(first_token)


def test_abandon_counts_a_failed_delivery(make_namespace: MakeNamespace) -> None:
    queue = make_namespace().queue("orders")
    send(queue)

    queue.abandon(token(lock(queue)))

    assert lock(queue).delivery_count == 1


def test_release_makes_the_message_available_without_counting(
    make_namespace: MakeNamespace,
) -> None:
    queue = make_namespace(max_delivery_count=1).queue("orders")
    send(queue)

    queue.release(token(lock(queue)))

    assert lock(queue).delivery_count == 0


def test_releasing_a_holder_ends_only_its_locks_as_failed_deliveries(
    make_namespace: MakeNamespace,
) -> None:
    queue = make_namespace().queue("orders")
    for _ in range(3):
        send(queue)
    gone_1, kept, gone_2 = lock(queue, "gone"), lock(queue, "staying"), lock(queue, "gone")

    queue.release_holder("gone")

    redelivered = [lock(queue, "next"), lock(queue, "next")]
    assert [m.sequence_number for m in redelivered] == [
        gone_1.sequence_number,
        gone_2.sequence_number,
    ]
    assert [m.delivery_count for m in redelivered] == [1, 1]
    queue.complete(token(kept))
    with pytest.raises(LockLost):
        queue.complete(uuid.uuid4())


def test_reaching_max_delivery_count_dead_letters_like_the_service(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    namespace = make_namespace(max_delivery_count=3)
    queue = namespace.queue("orders")
    send(queue, b"poison")

    queue.abandon(token(lock(queue)))
    lock(queue)
    clock.tick(LOCK_MS)
    namespace.advance()
    lock(queue, holder="disconnecting")
    queue.release_holder("disconnecting")

    assert queue.lock_next(RECEIVER) is None
    dead = lock(namespace.queue("orders/$deadletterqueue"))
    assert dead.payload == b"poison"
    assert dead.delivery_count == 3
    assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert (
        dead.dead_letter_description == "Message could not be consumed after 3 delivery attempts."
    )
    assert dead.dead_letter_source == "orders"


# -- dead-letter queue ----------------------------------------------------------------------


def test_dead_letter_keeps_reason_description_and_source(make_namespace: MakeNamespace) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    sent = send(queue, b"bad")

    queue.dead_letter(token(lock(queue)), "ValidationFailed", "customer is missing")

    dead_letters = namespace.queue("orders/$deadletterqueue")
    assert dead_letters.name == "orders/$deadletterqueue"
    [peeked] = dead_letters.peek(1, 10)
    assert peeked.sequence_number == sent.sequence_number
    assert (peeked.dead_letter_reason, peeked.dead_letter_description) == (
        "ValidationFailed",
        "customer is missing",
    )
    assert peeked.dead_letter_source == "orders"
    assert queue.peek(1, 10) == []


def test_the_dead_letter_queue_can_be_locked_completed_and_reported_ready(
    make_namespace: MakeNamespace,
) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    dead_letters = namespace.queue("orders/$DeadLetterQueue")
    send(queue)
    namespace.take_ready()

    queue.dead_letter(token(lock(queue)), None, None)

    assert namespace.take_ready() == {dead_letters}
    dead_letters.complete(token(lock(dead_letters)))
    assert dead_letters.peek(1, 10) == []


def test_dead_letter_messages_never_leave_the_dead_letter_queue(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    namespace = make_namespace(
        max_delivery_count=1,
        default_message_ttl=timedelta(seconds=5),
        dead_lettering_on_message_expiration=True,
    )
    queue = namespace.queue("orders")
    dead_letters = namespace.queue("orders/$deadletterqueue")
    send(queue)
    queue.abandon(token(lock(queue)))

    for _ in range(3):
        dead_letters.abandon(token(lock(dead_letters)))
    clock.tick(3_600_000)
    namespace.advance()
    message = lock(dead_letters)

    assert message.delivery_count == 4
    with pytest.raises(InvalidOperation, match="complete it instead"):
        dead_letters.dead_letter(token(message), "again", None)
    dead_letters.complete(token(message))


def test_sending_to_a_dead_letter_queue_is_refused(make_namespace: MakeNamespace) -> None:
    dead_letters = make_namespace().queue("orders/$deadletterqueue")

    with pytest.raises(InvalidOperation, match="only by being dead-lettered"):
        send(dead_letters)


# -- defer ----------------------------------------------------------------------------------


def test_deferred_messages_are_received_only_by_sequence_number(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    queue = make_namespace().queue("orders")
    first = send(queue, b"later")
    send(queue, b"now")
    queue.defer(token(lock(queue)))

    assert lock(queue).payload == b"now"
    assert queue.lock_next(RECEIVER) is None
    [deferred] = queue.receive_deferred([first.sequence_number], "management")
    assert deferred.payload == b"later"
    assert deferred.state is MessageState.DEFERRED
    assert deferred.locked_until == clock.now + LOCK_MS
    queue.complete(token(deferred))
    assert [m.payload for m in queue.peek(1, 10)] == [b"now"]


def test_receive_deferred_refuses_numbers_that_are_not_deferred(
    make_namespace: MakeNamespace,
) -> None:
    queue = make_namespace().queue("orders")
    deferred = send(queue)
    active = send(queue)
    queue.defer(token(lock(queue)))

    with pytest.raises(MessageNotFound, match=str(active.sequence_number)):
        queue.receive_deferred([deferred.sequence_number, active.sequence_number], RECEIVER)
    with pytest.raises(MessageNotFound):
        queue.receive_deferred([999], RECEIVER)
    assert len(queue.receive_deferred([deferred.sequence_number], RECEIVER)) == 1
    with pytest.raises(MessageNotFound, match="already locked"):
        queue.receive_deferred([deferred.sequence_number], RECEIVER)


def test_abandoning_a_re_received_deferred_message_keeps_it_deferred(
    make_namespace: MakeNamespace,
) -> None:
    queue = make_namespace().queue("orders")
    sent = send(queue)
    queue.defer(token(lock(queue)))
    [deferred] = queue.receive_deferred([sent.sequence_number], RECEIVER)

    queue.abandon(token(deferred))

    assert queue.active_count() == 0
    assert queue.lock_next(RECEIVER) is None
    [again] = queue.receive_deferred([sent.sequence_number], RECEIVER)
    assert again.delivery_count == 1
    assert again.state is MessageState.DEFERRED


def test_a_deferred_message_can_be_dead_lettered_through_its_new_lock(
    make_namespace: MakeNamespace,
) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    sent = send(queue)
    queue.defer(token(lock(queue)))
    [deferred] = queue.receive_deferred([sent.sequence_number], RECEIVER)

    queue.dead_letter(token(deferred), "Gave up", "after deferral")

    dead = lock(namespace.queue("orders/$deadletterqueue"))
    assert dead.state is MessageState.ACTIVE
    assert dead.dead_letter_reason == "Gave up"


def test_a_deferred_message_whose_lock_expired_can_be_received_again(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    queue = make_namespace().queue("orders")
    sent = send(queue)
    queue.defer(token(lock(queue)))
    queue.receive_deferred([sent.sequence_number], RECEIVER)
    clock.tick(LOCK_MS)

    [again] = queue.receive_deferred([sent.sequence_number], RECEIVER)

    assert again.delivery_count == 1


# -- duplicate detection ---------------------------------------------------------------------


def test_duplicates_within_the_window_are_dropped(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    queue = make_namespace(
        requires_duplicate_detection=True, duplicate_detection_window=timedelta(seconds=20)
    ).queue("orders")
    send(queue, b"first", message_id="order-1")
    clock.tick(19_999)

    dropped = queue.enqueue(
        b"again", message_id="order-1", time_to_live_ms=None, scheduled_for=None
    )
    other = send(queue, b"other", message_id="order-2")

    assert dropped is None
    assert other.sequence_number == 2
    assert drain_payloads(queue) == [b"first", b"other"]


def test_the_duplicate_window_slides_with_the_clock(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    queue = make_namespace(
        requires_duplicate_detection=True, duplicate_detection_window=timedelta(seconds=20)
    ).queue("orders")
    send(queue, b"first", message_id="order-1")
    clock.tick(20_000)

    accepted = send(queue, b"after the window", message_id="order-1")
    clock.tick(10_000)
    dropped = queue.enqueue(b"dup", message_id="order-1", time_to_live_ms=None, scheduled_for=None)

    assert accepted.sequence_number == 2
    assert dropped is None


def test_without_duplicate_detection_equal_ids_are_all_kept(
    make_namespace: MakeNamespace,
) -> None:
    queue = make_namespace().queue("orders")
    send(queue, b"1", message_id="same")
    send(queue, b"2", message_id="same")

    assert drain_payloads(queue) == [b"1", b"2"]


# -- scheduled messages ----------------------------------------------------------------------


def test_scheduled_messages_become_available_at_their_time(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    at = clock.now + 60_000
    scheduled = send(queue, b"later", scheduled_for=at)
    namespace.take_ready()

    assert scheduled.state is MessageState.SCHEDULED
    assert queue.lock_next(RECEIVER) is None
    assert namespace.next_due() == at
    clock.tick(59_999)
    namespace.advance()
    assert namespace.take_ready() == set()

    clock.tick(1)
    namespace.advance()

    assert namespace.take_ready() == {queue}
    received = lock(queue)
    assert received.payload == b"later"
    assert received.enqueued_at == at


def test_scheduled_messages_mixed_with_traffic_keep_their_own_sequence_numbers(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    send(queue, b"a")
    scheduled = send(queue, b"scheduled", scheduled_for=clock.now + 1_000)
    send(queue, b"b")
    past = send(queue, b"due already", scheduled_for=clock.now - 1)

    assert drain_payloads(queue) == [b"a", b"b", b"due already"]
    clock.tick(1_000)
    namespace.advance()
    send(queue, b"c")
    received = queue.receive_and_delete_next()
    assert received is not None
    assert (received.payload, received.sequence_number) == (b"scheduled", 2)
    assert scheduled.sequence_number == 2
    assert past.sequence_number == 4
    assert drain_payloads(queue) == [b"c"]


def test_cancelled_scheduled_messages_never_arrive(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    cancelled = send(queue, b"cancelled", scheduled_for=clock.now + 1_000)
    kept = send(queue, b"kept", scheduled_for=clock.now + 1_000)
    active = send(queue, b"active")

    queue.cancel_scheduled([cancelled.sequence_number, active.sequence_number, 999])
    clock.tick(1_000)
    namespace.advance()

    assert [m.sequence_number for m in queue.peek(1, 10)] == [
        kept.sequence_number,
        active.sequence_number,
    ]
    assert drain_payloads(queue) == [b"kept", b"active"]


# -- time to live ----------------------------------------------------------------------------


def test_effective_ttl_is_the_smaller_of_message_and_queue_default(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    queue = make_namespace(default_message_ttl=timedelta(minutes=1)).queue("orders")

    assert send(queue, ttl_ms=10_000).expires_at == clock.now + 10_000
    assert send(queue, ttl_ms=3_600_000).expires_at == clock.now + 60_000
    assert send(queue).expires_at == clock.now + 60_000
    assert make_namespace().queue("orders").enqueue(
        b"", message_id=None, time_to_live_ms=None, scheduled_for=None
    ) == BrokerMessage(1, b"", None, clock.now, None, None, MessageState.ACTIVE)


def test_an_expired_message_is_never_delivered_even_before_advance(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    queue = make_namespace().queue("orders")
    send(queue, b"short", ttl_ms=1_000)
    send(queue, b"long", ttl_ms=10_000)
    clock.tick(1_000)

    assert drain_payloads(queue) == [b"long"]


def test_expired_messages_vanish_without_dead_lettering_on_expiration(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    send(queue, ttl_ms=1_000)
    assert namespace.next_due() == clock.now + 1_000

    clock.tick(1_000)
    namespace.advance()

    assert queue.peek(1, 10) == []
    assert queue.active_count() == 0
    assert namespace.queue("orders/$deadletterqueue").peek(1, 10) == []


def test_expired_messages_are_dead_lettered_when_configured(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    namespace = make_namespace(dead_lettering_on_message_expiration=True)
    queue = namespace.queue("orders")
    send(queue, b"stale", ttl_ms=1_000)
    namespace.take_ready()

    clock.tick(1_000)
    namespace.advance()

    dead_letters = namespace.queue("orders/$deadletterqueue")
    assert namespace.take_ready() == {dead_letters}
    dead = lock(dead_letters)
    assert dead.payload == b"stale"
    assert dead.dead_letter_reason == "TTLExpiredException"
    assert dead.dead_letter_description == "The message expired and was dead lettered."
    assert queue.active_count() == 0


def test_a_locked_message_expires_only_when_its_lock_ends(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    namespace = make_namespace(dead_lettering_on_message_expiration=True)
    queue = namespace.queue("orders")
    send(queue, ttl_ms=1_000)
    message = lock(queue)
    clock.tick(5_000)
    namespace.advance()

    queue.renew_lock(token(message))
    queue.abandon(token(message))

    assert queue.active_count() == 0
    assert queue.lock_next(RECEIVER) is None
    assert lock(namespace.queue("orders/$deadletterqueue")).dead_letter_reason == (
        "TTLExpiredException"
    )


def test_a_scheduled_message_lives_its_ttl_from_its_scheduled_time(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    send(queue, b"scheduled", ttl_ms=1_000, scheduled_for=clock.now + 10_000)

    clock.tick(10_500)
    namespace.advance()

    assert drain_payloads(queue) == [b"scheduled"]


def test_deferred_messages_do_not_expire(make_namespace: MakeNamespace, clock: BrokerClock) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    sent = send(queue, ttl_ms=1_000)
    queue.defer(token(lock(queue)))

    clock.tick(5_000)
    namespace.advance()

    assert len(queue.receive_deferred([sent.sequence_number], RECEIVER)) == 1


# -- peek, receive-and-delete, readiness -----------------------------------------------------


def test_peek_shows_every_state_in_order_without_side_effects(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    queue = make_namespace().queue("orders")
    for _ in range(4):
        send(queue)
    send(queue, scheduled_for=clock.now + 60_000)
    locked = lock(queue)
    queue.defer(token(lock(queue)))

    peeked = queue.peek(2, 3)

    assert [m.sequence_number for m in peeked] == [2, 3, 4]
    assert [m.state for m in queue.peek(1, 100)] == [
        MessageState.ACTIVE,
        MessageState.DEFERRED,
        MessageState.ACTIVE,
        MessageState.ACTIVE,
        MessageState.SCHEDULED,
    ]
    assert queue.active_count() == 2
    assert locked.delivery_count == 0
    assert queue.peek(6, 10) == []
    assert queue.peek(1, 0) == []


def test_receive_and_delete_removes_at_once(make_namespace: MakeNamespace) -> None:
    queue = make_namespace().queue("orders")
    send(queue, b"only")

    received = queue.receive_and_delete_next()

    assert received is not None
    assert received.payload == b"only"
    assert received.lock_token is None
    assert queue.peek(1, 10) == []


def test_take_ready_reports_each_queue_that_gained_messages_once(
    make_namespace: MakeNamespace,
) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    assert namespace.take_ready() == set()

    send(queue)
    send(queue)

    assert namespace.take_ready() == {queue}
    assert namespace.take_ready() == set()
    queue.release(token(lock(queue)))
    assert namespace.take_ready() == {queue}


def test_next_due_is_none_when_nothing_is_pending(make_namespace: MakeNamespace) -> None:
    namespace = make_namespace()
    queue = namespace.queue("orders")
    send(queue)
    message = lock(queue)
    assert namespace.next_due() is not None

    queue.complete(token(message))

    assert namespace.next_due() is None


def test_many_short_locks_under_a_long_lock_duration_keep_pending_work_bounded(
    make_namespace: MakeNamespace,
) -> None:
    namespace = make_namespace(
        lock_duration=timedelta(minutes=5), default_message_ttl=timedelta(days=1)
    )
    queue = namespace.queue("orders")

    for _ in range(20_000):
        send(queue)
        queue.complete(token(lock(queue)))

    assert len(namespace._context.due) < 10_000


def test_a_locked_message_still_expires_after_pending_work_was_compacted(
    make_namespace: MakeNamespace, clock: BrokerClock
) -> None:
    namespace = make_namespace(
        lock_duration=timedelta(minutes=5), dead_lettering_on_message_expiration=True
    )
    queue = namespace.queue("orders")
    send(queue, b"long-lived", ttl_ms=600_000)
    held = lock(queue)
    for _ in range(10_000):
        send(queue, b"short-lived")
        queue.complete(token(lock(queue)))

    queue.abandon(token(held))
    clock.tick(600_000)
    namespace.advance()

    assert queue.active_count() == 0
    [dead] = namespace.queue("orders/$deadletterqueue").peek(1, 1)
    assert dead.payload == b"long-lived"


# -- namespace addressing --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("orders", "orders"),
        ("ORDERS", "orders"),
        ("orders/$deadletterqueue", "orders/$deadletterqueue"),
        ("orders/$DeadLetterQueue", "orders/$deadletterqueue"),
        ("sb://127.0.0.1:5672/orders", "orders"),
        ("amqps://host/orders/$deadletterqueue", "orders/$deadletterqueue"),
    ],
)
def test_queues_are_found_by_name_or_address(
    make_namespace: MakeNamespace, address: str, expected: str
) -> None:
    assert make_namespace().queue(address).name == expected


@pytest.mark.parametrize("address", ["missing", "sb://host/missing", "orders/$management", ""])
def test_unknown_entities_are_not_found_like_on_the_service(
    make_namespace: MakeNamespace, address: str
) -> None:
    with pytest.raises(EntityNotFound) as raised:
        make_namespace().queue(address)

    assert str(raised.value) == f"The messaging entity '{address}' could not be found."


def test_auto_create_makes_unknown_queues_with_default_settings(
    make_namespace: MakeNamespace,
) -> None:
    namespace = make_namespace(auto_create=True)

    created = namespace.queue("sb://host/Fresh/$deadletterqueue")

    assert created.name == "Fresh/$deadletterqueue"
    assert namespace.queue("fresh").settings == QueueSettings(name="Fresh")
    assert {q.name for q in namespace.queues()} == {"orders", "Fresh"}
