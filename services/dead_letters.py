"""Dead-letter triage and the dead-letter watcher (S3, E8, DLQ with metadata for triage).

`list_dead_letters`, `resubmit_dead_letter` and `discard_dead_letter` act on the dead-letter
sub-queue of a queue the app consumes (`Settings.consumed_queues`), any other being an
`UnknownQueue`; of two operators resubmitting or discarding the same one, exactly one gets
True. `watch_dead_letters` raises one operator alert per new dead letter, a WARNING log line
and a `dead-letter` alert with no body content, and returns them in a `WatchReport`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from domain.contracts import AlertKind, OperatorAlert, operator_alert
from domain.dead_letters import DeadLetter, watch_step
from domain.outgoing_messages import alert_outgoing
from domain.ports import BlockingCalls, DeadLetterQueues, MessagePublisher, StateStore
from observability import logs, metrics

log = logs.get_logger("app.dead_letters")

WATCH_PEEK_LIMIT = 1000
"""The most dead letters the watcher peeks per queue per run; more wait for the next run."""

MAX_LIST_COUNT = 250
"""The most dead letters one `list_dead_letters` call returns."""


class UnknownQueue(ValueError):
    """The queue is not one the app consumes, so its dead letters are not the app's."""

    def __init__(self, queue: str, consumed: Sequence[str]) -> None:
        super().__init__(
            f"queue {queue!r} is not consumed by this app; its dead-letter queues are those of "
            f"{', '.join(consumed)}"
        )
        self.queue = queue


def checked_queue(queue: str, consumed: Sequence[str]) -> str:
    """`queue` when the app consumes it; `UnknownQueue` otherwise."""
    if queue not in consumed:
        raise UnknownQueue(queue, consumed)
    return queue


async def list_dead_letters(
    queues: DeadLetterQueues,
    queue: str,
    *,
    consumed: Sequence[str],
    after_sequence: int = 0,
    max_count: int = 50,
) -> list[DeadLetter]:
    """Up to `max_count` (at most `MAX_LIST_COUNT`) dead letters of `queue` numbered above
    `after_sequence`, with reason and description; pass the last one's number to page on."""
    if max_count < 1:
        raise ValueError(f"max_count must be >= 1, got {max_count}")
    return await queues.list(
        checked_queue(queue, consumed),
        after_sequence=max(after_sequence, 0),
        max_count=min(max_count, MAX_LIST_COUNT),
    )


async def resubmit_dead_letter(
    queues: DeadLetterQueues, queue: str, sequence_number: int, *, consumed: Sequence[str]
) -> bool:
    """Send dead letter `sequence_number` back to `queue` and remove it; False when it is
    no longer there (someone else acted on it first). Processing is idempotent by OrderID
    (S2), so a resubmitted order that did arrive before changes nothing."""
    return await queues.resubmit(checked_queue(queue, consumed), sequence_number)


async def discard_dead_letter(
    queues: DeadLetterQueues, queue: str, sequence_number: int, *, consumed: Sequence[str]
) -> bool:
    """Remove dead letter `sequence_number` of `queue` for good; False when it is no
    longer there."""
    return await queues.discard(checked_queue(queue, consumed), sequence_number)


def dead_letter_alert(letter: DeadLetter, *, now: datetime) -> OperatorAlert:
    """The operator alert of one dead letter, its message id stable per dead letter."""
    alert = operator_alert(
        kind=AlertKind.DEAD_LETTER,
        order_id=letter.order_id,
        reason=f"{letter.reason or 'no reason given'}: {letter.description or 'no description'}",
        at=now,
        message_id=f"{AlertKind.DEAD_LETTER.value}:{letter.queue}:{letter.sequence_number}",
    )
    body = {
        **alert.body,
        "queue": letter.queue,
        "sequenceNumber": letter.sequence_number,
        "messageId": letter.message_id,
        "deadLetterReason": letter.reason,
        "description": letter.description,
        "deliveryCount": letter.delivery_count,
    }
    return OperatorAlert(body=body, message_id=alert.message_id)


@dataclass(frozen=True)
class WatchReport:
    new: tuple[DeadLetter, ...]
    """Every dead letter this run reported, queue by queue: count them by queue and reason
    for the dead-letter metric."""
    failed: tuple[str, ...]
    """Queues this run could not look at (each logged); they are looked at again next run."""


async def watch_dead_letters(
    queues: DeadLetterQueues,
    states: StateStore,
    publisher: MessagePublisher,
    *,
    consumed: Sequence[str],
    alerts_queue: str,
    now: datetime,
    blocking: BlockingCalls,
    peek_limit: int = WATCH_PEEK_LIMIT,
) -> WatchReport:
    """Alert once per dead letter of `consumed` queues not reported before (S3, E8).

    A queue that cannot be read is logged and skipped, the others are still watched; its
    mark is unchanged, so nothing of it is missed.
    """
    new: list[DeadLetter] = []
    failed: list[str] = []
    for queue in consumed:
        try:
            new.extend(
                await _watch_queue(
                    queues,
                    states,
                    publisher,
                    queue,
                    alerts_queue,
                    now=now,
                    blocking=blocking,
                    peek_limit=peek_limit,
                )
            )
        except Exception:
            log.exception("dead-letter watch failed; it is retried next run", queue=queue)
            failed.append(queue)
    return WatchReport(tuple(new), tuple(failed))


def _mark_name(queue: str) -> str:
    return f"dead-letters:{queue}"


async def _watch_queue(
    queues: DeadLetterQueues,
    states: StateStore,
    publisher: MessagePublisher,
    queue: str,
    alerts_queue: str,
    *,
    now: datetime,
    blocking: BlockingCalls,
    peek_limit: int,
) -> tuple[DeadLetter, ...]:
    mark = await blocking(states.load_watch_mark, _mark_name(queue))
    # First the source queue, then its dead letters: whatever left the queue in between is
    # among the dead letters peeked, or gone for good (domain.dead_letters.watch_step).
    oldest = await queues.oldest_sequence_number(queue)
    peeked = await queues.list(queue, after_sequence=mark.next_start - 1, max_count=peek_limit)
    step = watch_step(
        mark, oldest_in_source=oldest, dead_letters=peeked, complete=len(peeked) < peek_limit
    )
    for letter in step.new:
        log.warning(
            "operator alert: dead letter",
            queue=letter.queue,
            sequence=letter.sequence_number,
            reason=letter.reason,
            description=letter.description,
            message_id=letter.message_id,
            order_id=letter.order_id,
            delivery_count=letter.delivery_count,
        )
        metrics.dead_lettered(letter.queue, letter.reason or "unknown")
        await publisher.send(alert_outgoing(dead_letter_alert(letter, now=now), alerts_queue))
    if step.mark != mark:
        await blocking(states.save_watch_mark, _mark_name(queue), step.mark)
    if len(peeked) >= peek_limit:
        log.warning(
            "dead-letter queue holds more letters past the watch mark than one run peeks; the "
            "rest are reported on later runs - triage them",
            queue=queue,
            peek_limit=peek_limit,
        )
    return step.new
