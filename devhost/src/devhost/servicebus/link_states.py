"""What the broker keeps about each attached AMQP link.

The state object lives in the proton link's record (``link.servicebus_state``) so that every event
finds it without a lookup table; a consumer's state is also the lock holder the queue model sees,
so a link that goes away releases exactly its own locks.
"""

from __future__ import annotations

import itertools
from typing import Any

from devhost.servicebus.entities import Queue
from devhost.servicebus.management import ManagementOperations

DEAD_LETTER_SUFFIX = "/$deadletterqueue"
SESSION_FILTER = "com.microsoft:session-filter"


class LinkState:
    """One attached link: its address, its queue (if any), and whether it has gone away."""

    __slots__ = ("address", "closed", "link", "queue")

    def __init__(self, link: Any, address: str, queue: Queue | None) -> None:
        self.link = link
        self.address = address
        self.queue = queue
        self.closed = False


class Consumer(LinkState):
    """A broker sender link delivering a queue to a client's receiver; the lock holder."""

    __slots__ = ("dead_letter_queue", "peek_lock", "tags")

    def __init__(self, link: Any, address: str, queue: Queue, *, peek_lock: bool) -> None:
        super().__init__(link, address, queue)
        self.peek_lock = peek_lock
        self.dead_letter_queue = queue.name.lower().endswith(DEAD_LETTER_SUFFIX)
        self.tags = itertools.count(1)


class Producer(LinkState):
    """A broker receiver link taking messages from a client's sender into a queue."""

    __slots__ = ()


class RequestLink(LinkState):
    """A broker receiver link for $cbs / $management requests; holds deferred-message locks."""

    __slots__ = ("operations",)

    def __init__(
        self, link: Any, address: str, queue: Queue | None, operations: ManagementOperations | None
    ) -> None:
        super().__init__(link, address, queue)
        self.operations = operations


class ReplyLink(LinkState):
    """A broker sender link carrying $cbs / $management responses."""

    __slots__ = ()


def attach_state(link: Any, state: LinkState) -> None:
    link.servicebus_state = state


def detach_state(state: LinkState) -> None:
    # the state lives in the proton link's record and points back at the link: break the cycle
    state.link.servicebus_state = None


def state_of(link: Any) -> LinkState | None:
    state = getattr(link, "servicebus_state", None)
    return state if isinstance(state, LinkState) else None


def has_session_filter(link: Any) -> bool:
    """Whether a client's receiver asks for a session (sessions are not supported yet)."""
    filters = link.remote_source.filter
    if filters is None:
        return False
    filters.rewind()
    if not filters.next():
        return False
    value = filters.get_object()
    return isinstance(value, dict) and any(str(key) == SESSION_FILTER for key in value)
