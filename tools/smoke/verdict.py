"""What the smoke test saw of one order, and the verdict it gives (S1, R1, R2, S3).

`Observation` holds what the probe read (the statuses on the reply queue, where the order's
message was left, the dead letters naming the order); `judge` turns it into one check line
per expectation and, when one fails, a named cause with what the operator should do. Plain
Python, so every cause is tested without a deployment.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from domain.contracts import OrderStatus
from domain.dead_letters import MAX_DELIVERY_COUNT_EXCEEDED

ENDINGS = frozenset(OrderStatus) - {OrderStatus.RECEIVED, OrderStatus.IN_PROGRESS}
"""The statuses after which an order hears nothing more."""


class Cause(enum.Enum):
    """Why a smoke test failed, each with what to do about it."""

    SETTLEMENT_UNAVAILABLE = (
        "settlement unavailable on the plan",
        "The app took the order but could not settle its message (or could not be invoked with"
        " its settlement binding): messages are redelivered, then dead-lettered after"
        " MaxDeliveryCount, never lost. Read the host's logs for 'settlement', roll back to the"
        " last deployment whose smoke test passed, then resubmit the dead letters from the"
        " console (docs/deployment.md, 'After azd up: the smoke test')",
    )
    NO_FUNCTIONS_INDEXED = (
        "no functions indexed",
        "The orders message was never delivered to the app: check that the deployment succeeded"
        " and that the functions are listed (az functionapp function list), then read the host's"
        " startup logs for indexing errors",
    )
    IDENTITY_OR_ROLE_MISSING = (
        "identity or role missing",
        "Sign in (az login / azd auth login) as the deployer, and check that it has Azure Service"
        " Bus Data Sender on the orders queue and Data Receiver on the reply queue; a new role"
        " assignment can take minutes to apply",
    )
    ORDER_REFUSED = (
        "order refused",
        "The app dead-lettered the smoke order: the reason says what it refused (a reply queue"
        " missing from REPLY_QUEUES is the usual one)",
    )
    ORDER_FAILED = (
        "order failed",
        "The workflow ran but did not complete the order: read its reason, and the order's"
        " record in the operator console",
    )
    STATUS_DEAD_LETTERED = (
        "status dead-lettered",
        "A status for the smoke order reached the reply queue's dead-letter queue: check the"
        " reply queue's properties and the app's sender role on it",
    )
    SERVICE_BUS_FAILED = (
        "Service Bus call failed",
        "A send, receive or peek failed or got no answer in time: check the namespace, that"
        " both queues exist, and the network path to the namespace",
    )
    TIMEOUT = (
        "timeout",
        "The order did not finish within the bound: run the smoke test again with a longer"
        " --bound (a cold start on Flex Consumption can take minutes), then read the order's"
        " record and the host's logs",
    )

    @property
    def label(self) -> str:
        return self.value[0]

    @property
    def advice(self) -> str:
        return self.value[1]


class OrdersMessage(enum.Enum):
    """Where the smoke order's message was at the end."""

    GONE = "gone"
    """Neither on the orders queue nor in its dead-letter queue: the app settled it."""
    WAITING = "waiting"
    """On the orders queue, never delivered."""
    DELIVERED = "delivered"
    """On the orders queue, delivered once: the app holds it, or put it back once."""
    REDELIVERED = "redelivered"
    """On the orders queue, delivered more than once."""
    DEAD_LETTERED = "dead-lettered"


@dataclass(frozen=True)
class Status:
    """A status message for the smoke order, as read from the reply queue (R2)."""

    status: str
    step: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Observation:
    """What the probe saw of one smoke order."""

    order_id: str
    steps: tuple[str, ...]
    statuses: tuple[Status, ...] = ()
    orders_message: OrdersMessage = OrdersMessage.GONE
    delivery_count: int = 0
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    reply_dead_letters: int = 0
    auth_error: str | None = None
    """The SDK's authentication or authorization error, when one stopped the probe."""
    service_error: str | None = None
    """Any other Service Bus error or call timeout that stopped the probe."""


@dataclass(frozen=True)
class Verdict:
    """One line per check, and the cause of the first failure (None: passed)."""

    checks: tuple[tuple[bool, str], ...]
    cause: Cause | None
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.cause is None

    def report(self) -> list[str]:
        """The lines the smoke test prints: the checks, then the final verdict."""
        out = [f"{'PASS' if ok else 'FAIL'} {what}" for ok, what in self.checks]
        if self.cause is None:
            out.append("smoke test passed")
        else:
            detail = f" ({self.detail})" if self.detail else ""
            out.append(f"smoke test FAILED: {self.cause.label}{detail}. {self.cause.advice}")
        return out


def expected_statuses(steps: Sequence[str]) -> list[Status]:
    """`received`, an `in-progress` per step in order, then `completed` (R2)."""
    return [
        Status("received"),
        *(Status("in-progress", step) for step in steps),
        Status("completed"),
    ]


def _name(status: Status) -> str:
    return status.status if status.step is None else f"{status.status} {status.step}"


def judge(seen: Observation) -> Verdict:
    """The checks and the named cause of the first failure, most specific cause first."""
    if seen.auth_error is not None:
        return Verdict(
            ((False, f"authorized: {seen.auth_error}"),),
            Cause.IDENTITY_OR_ROLE_MISSING,
            seen.auth_error,
        )
    if seen.service_error is not None:
        return Verdict(
            ((False, f"Service Bus answered: {seen.service_error}"),),
            Cause.SERVICE_BUS_FAILED,
            seen.service_error,
        )
    checks: list[tuple[bool, str]] = []
    arrived = {(s.status, s.step) for s in seen.statuses}
    for expected in expected_statuses(seen.steps):
        checks.append(((expected.status, expected.step) in arrived, _name(expected)))
    orders_clean = seen.orders_message is not OrdersMessage.DEAD_LETTERED
    checks.append(
        (
            orders_clean,
            "no dead letter on the orders queue"
            if orders_clean
            else f"the order was dead-lettered: {seen.dead_letter_reason}",
        )
    )
    checks.append(
        (
            seen.reply_dead_letters == 0,
            f"{seen.reply_dead_letters} dead letters for the order on the reply queue",
        )
        if seen.reply_dead_letters
        else (True, "no dead letter on the reply queue")
    )
    if seen.delivery_count <= 1:
        checks.append((True, "the orders message was delivered once at most"))
    else:
        checks.append((False, f"the orders message was delivered {seen.delivery_count} times"))
    cause, detail = _cause(seen)
    return Verdict(tuple(checks), cause, detail)


def _cause(seen: Observation) -> tuple[Cause | None, str]:
    ending = next((s for s in seen.statuses if s.status in ENDINGS), None)
    if seen.orders_message is OrdersMessage.DEAD_LETTERED:
        if seen.dead_letter_reason == MAX_DELIVERY_COUNT_EXCEEDED:
            deliveries = seen.delivery_count
            return Cause.SETTLEMENT_UNAVAILABLE, f"dead-lettered after {deliveries} deliveries"
        return Cause.ORDER_REFUSED, f"{seen.dead_letter_reason}: {seen.dead_letter_description}"
    if seen.orders_message is OrdersMessage.REDELIVERED or seen.delivery_count > 1:
        return Cause.SETTLEMENT_UNAVAILABLE, f"delivered {seen.delivery_count} times"
    if not seen.statuses and seen.orders_message is OrdersMessage.WAITING:
        return Cause.NO_FUNCTIONS_INDEXED, "the order is still on the orders queue"
    if seen.reply_dead_letters:
        return Cause.STATUS_DEAD_LETTERED, f"{seen.reply_dead_letters} dead letters"
    if ending is not None and ending.status != "completed":
        return Cause.ORDER_FAILED, f"{ending.status}: {ending.reason}"
    missing = [
        _name(s)
        for s in expected_statuses(seen.steps)
        if (s.status, s.step) not in {(t.status, t.step) for t in seen.statuses}
    ]
    if missing:
        last = _name(seen.statuses[-1]) if seen.statuses else "none"
        where = {
            OrdersMessage.GONE: "the order left the orders queue",
            OrdersMessage.WAITING: "the order waits on the orders queue",
            OrdersMessage.DELIVERED: "the app holds the order",
        }.get(seen.orders_message, "")
        return (
            Cause.TIMEOUT,
            f"last status seen: {last}; missing: {', '.join(missing)}; {where}",
        )
    return None, ""
