"""Dead letters as an operator triages them, and what the dead-letter watcher remembers
(S3, E8, "DLQ with metadata for triage").

A `DeadLetter` is one message of a dead-letter sub-queue: its broker metadata and a
`body_preview` with the body's shape, never its content (`summarise_body`).
`resubmitted_message_id` names the copy sent back to the source queue. A `WatchMark` is the
watcher's memory of one queue, and `watch_step` the new dead letters and the next mark.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from domain.records import ORDER_ID_PATTERN

MAX_DELIVERY_COUNT_EXCEEDED = "MaxDeliveryCountExceeded"
"""The reason Service Bus gives a message that exhausted its queue's MaxDeliveryCount."""

TTL_EXPIRED = "TTLExpiredException"
"""The reason Service Bus gives a message that expired on a queue that dead-letters expiry."""

MAX_MESSAGE_ID_LENGTH = 128
"""Service Bus refuses longer message ids."""

RESUBMITTED_FROM_PROPERTY = "DeadLetterResubmittedFrom"
"""Application property of a resubmitted copy: the sequence number of its dead letter."""

DEAD_LETTER_PROPERTIES = frozenset({"DeadLetterReason", "DeadLetterErrorDescription"})
"""Application properties the broker adds to a dead letter; a resubmitted copy drops them."""


@dataclass(frozen=True)
class DeadLetter:
    """One message of `queue`'s dead-letter sub-queue, as an operator sees it."""

    queue: str
    """The source queue (not the sub-queue's path)."""
    sequence_number: int
    message_id: str | None
    reason: str | None
    description: str | None
    enqueued_at: datetime | None
    """When the message was enqueued in its source queue."""
    delivery_count: int
    application_properties: Mapping[str, str | int | float | bool | None] = field(
        default_factory=dict
    )
    """The message's own application properties (not the dead-letter reason/description)."""
    body_preview: str = ""
    """The body's shape without its content: a JSON object's sorted keys (`summarise_body`)."""
    order_id: str | None = None
    """The order the message is about, when its body names one."""


@dataclass(frozen=True)
class BodySummary:
    preview: str
    order_id: str | None


def summarise_body(body: bytes) -> BodySummary:
    """The preview and order id of a message body, with no personal data."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return BodySummary(f"{len(body)} bytes, not JSON", None)
    except RecursionError:
        return BodySummary(f"{len(body)} bytes, unreadable: nested too deep to parse", None)
    if not isinstance(document, dict):
        return BodySummary(f"JSON {type(document).__name__}, {len(body)} bytes", None)
    order_id = _order_id(document)
    keys = ", ".join(sorted(str(key) for key in document))
    preview = f"JSON object, keys: {keys}" if keys else "JSON object, no keys"
    if order_id is not None:
        preview += f"; orderId={order_id}"
    return BodySummary(preview, order_id)


def _order_id(document: Mapping[str, Any]) -> str | None:
    candidate = document.get("orderId")
    if not isinstance(candidate, str):
        instance = document.get("instanceId")
        candidate = instance.rpartition(":")[0] if isinstance(instance, str) else None
    if isinstance(candidate, str) and ORDER_ID_PATTERN.fullmatch(candidate):
        return candidate
    return None


def resubmitted_message_id(message_id: str | None, sequence_number: int) -> str:
    """The message id of the copy of dead letter `sequence_number` sent back to its queue.

    Derived, so the source queue's duplicate detection does not drop it as the original;
    stable, so resending the same copy is de-duplicated; at most 128 characters.
    """
    derived = f"{message_id or '-'}:resubmitted:{sequence_number}"
    if len(derived) <= MAX_MESSAGE_ID_LENGTH:
        return derived
    digest = hashlib.sha256((message_id or "").encode()).hexdigest()[:32]
    return f"{digest}:resubmitted:{sequence_number}"


@dataclass(frozen=True)
class WatchMark:
    """What the watcher has reported of one queue's dead letters.

    Every dead letter numbered below `floor` was reported, or will never exist; `reported`
    holds the numbers at or above the floor that were reported and were still in the
    dead-letter queue when last looked at. `resume` is where the next look goes on when the
    last one stopped at its peek limit (0: start at the floor).
    """

    floor: int = 0
    reported: frozenset[int] = frozenset()
    resume: int = 0

    @property
    def next_start(self) -> int:
        """The sequence number the next look peeks from."""
        return max(self.floor, self.resume)

    def to_document(self) -> dict[str, Any]:
        return {"floor": self.floor, "reported": sorted(self.reported), "resume": self.resume}

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> WatchMark:
        return cls(
            floor=int(document.get("floor", 0)),
            reported=frozenset(int(n) for n in document.get("reported", ())),
            resume=int(document.get("resume", 0)),
        )


@dataclass(frozen=True)
class WatchStep:
    new: tuple[DeadLetter, ...]
    """Dead letters not reported before, by sequence number."""
    mark: WatchMark
    """The mark to remember once `new` has been reported."""


def watch_step(
    mark: WatchMark,
    *,
    oldest_in_source: int | None,
    dead_letters: Iterable[DeadLetter],
    complete: bool,
) -> WatchStep:
    """The dead letters to report and the next mark, from one look at a queue.

    `oldest_in_source` is the smallest sequence number in the source queue (any state),
    read BEFORE `dead_letters` were peeked from `mark.next_start` on, so that a message it
    no longer holds is either among `dead_letters` or gone for good; None when it was
    empty. `complete` says the peek reached the end of the dead-letter queue; when it did
    not, the next look resumes after the last peeked number, and a look that reaches the end
    starts again at the floor, so a dead letter below the resume point is found then.
    """
    start = mark.next_start
    peeked = sorted(
        (letter for letter in dead_letters if letter.sequence_number >= start),
        key=lambda letter: letter.sequence_number,
    )
    seen = {letter.sequence_number for letter in peeked}
    new = tuple(letter for letter in peeked if letter.sequence_number not in mark.reported)
    last_peeked = peeked[-1].sequence_number if peeked else start - 1
    floor = mark.floor
    if start == mark.floor:
        # Every number from the floor to the last peeked one was looked at: a dead letter
        # there that was not peeked left the queue, or is still a message of the source
        # queue, numbered at or above `oldest_in_source`. Past it come only messages of the
        # source queue or new ones.
        candidate = last_peeked + 1
        if oldest_in_source is not None:
            candidate = min(candidate, oldest_in_source)
        floor = max(floor, candidate)

    def looked_at(number: int) -> bool:
        return start <= number and (complete or number <= last_peeked)

    reported = frozenset(
        number
        for number in (*mark.reported, *(letter.sequence_number for letter in new))
        if number >= floor and (number in seen or not looked_at(number))
    )
    return WatchStep(new, WatchMark(floor, reported, 0 if complete else last_peeked + 1))
