"""Where status replies and operator alerts leave the app (R1, R2, S3, E8, U4, C2).

`send_statuses` sends each status to its order's reply queue only while that queue is on the
REPLY_QUEUES allow-list (R1); `send_alert` sends to OPERATOR_ALERTS_QUEUE.
"""

from __future__ import annotations

from collections.abc import Iterable

import bootstrap
from domain.contracts import OperatorAlert, StatusMessage
from domain.outgoing_messages import alert_outgoing, status_outgoing
from observability.tracing import status_span
from services.status import reply_queue_allowed


async def send_statuses(statuses: Iterable[StatusMessage]) -> None:
    allowed = bootstrap.services().settings.reply_queues
    publisher = bootstrap.publisher()
    for status in statuses:
        if not reply_queue_allowed(status.queue, allowed):
            continue
        with status_span(status.correlation_id, status.subject, status.body.get("step")):
            await publisher.send(status_outgoing(status))


async def send_alert(alert: OperatorAlert) -> None:
    queue = bootstrap.services().settings.operator_alerts_queue
    await bootstrap.publisher().send(alert_outgoing(alert, queue))
