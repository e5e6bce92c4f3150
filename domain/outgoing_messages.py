"""Outgoing messages as the app hands them to the `MessagePublisher` port (R2, E4, S3, E8, U4).

An `OutgoingMessage` is transport-neutral: the queue, the JSON body and the properties a
consumer reads. `status_outgoing` and `alert_outgoing` build one from a contract message,
always under the contract's stable message id (R2, E4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from domain.contracts import OperatorAlert, StatusMessage


@dataclass(frozen=True)
class OutgoingMessage:
    queue: str
    body: str
    message_id: str
    correlation_id: str | None = None
    subject: str | None = None
    application_properties: Mapping[str, str | int] = field(default_factory=dict)


def status_outgoing(status: StatusMessage) -> OutgoingMessage:
    """A status message for the submitting app's own reply queue (R2)."""
    return OutgoingMessage(
        queue=status.queue,
        body=status.body_json(),
        message_id=status.message_id,
        correlation_id=status.correlation_id,
        subject=status.subject,
    )


def alert_outgoing(alert: OperatorAlert, queue: str) -> OutgoingMessage:
    """An operator alert (S3, E8, U4); the order id correlates it when there is one."""
    order_id = alert.body.get("orderId")
    return OutgoingMessage(
        queue=queue,
        body=alert.body_json(),
        message_id=alert.message_id,
        correlation_id=None if order_id is None else str(order_id),
        subject=str(alert.body.get("kind")),
    )
