"""Where status replies, operator alerts and a record's outbox leave the app (R1, R2, S3, E8,
U4, C1, C2, C6).

`send_statuses` sends each status to its order's reply queue only while that queue is on the
REPLY_QUEUES allow-list (R1); `send_alert` sends to OPERATOR_ALERTS_QUEUE. `deliver_owed`
delivers what a state record's outbox owes, in order (alerts and statuses, then the
compensation start), then clears it (`services.outbox`).
"""

from __future__ import annotations

from collections.abc import Iterable

import azure.durable_functions as df

import bootstrap
from adapters import blocking_calls
from domain.contracts import OperatorAlert, StatusMessage
from domain.outgoing_messages import alert_outgoing, status_outgoing
from domain.ports import StoreError
from domain.records import StateRecord
from observability import logs
from observability.tracing import status_span
from orchestrators.order_workflow import ORCHESTRATOR, compensation_input, orchestration_version
from services import outbox
from services.status import reply_queue_allowed

log = logs.get_logger("app.replies")


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


async def deliver_owed(
    record: StateRecord,
    client: df.DurableOrchestrationClient | None = None,
    *,
    clear: bool = True,
) -> None:
    """Send what `record`'s outbox owes: its alerts, its statuses, then the compensation
    instance it owes, started through `client`; then, with `clear`, clear the outbox with
    one write conditional on `record`'s etag (C6).

    A send or a start that fails raises, and the outbox stays for a retry or the relay;
    what went out before goes out again under the same message ids (R2, E4). A clear that
    fails is logged: the relay delivers the outbox again."""
    owed = outbox.delivery(record)
    for alert in owed.alerts:
        await send_alert(alert)
    await send_statuses(owed.statuses)
    if owed.compensation is not None:
        if client is None:
            raise ValueError(
                f"order {record.order_id!r} owes the start of {owed.compensation.instance}, "
                "which needs a durable client"
            )
        await _start_compensation(client, record, owed.compensation)
    if clear and record.owed is not None:
        try:
            await blocking_calls.run(outbox.cleared, bootstrap.services().states, record)
        except StoreError as error:
            # Delivered all the same: the relay finds the outbox and sends it again, which
            # the stable ids make harmless.
            log.warning(
                "could not clear the outbox", order_id=record.order_id, error=type(error).__name__
            )


async def _start_compensation(
    client: df.DurableOrchestrationClient, record: StateRecord, start: outbox.CompensationStart
) -> None:
    """Start the compensation instance `start` names (U4, C1, C2), once: an instance of that
    id that exists already was started by an earlier delivery, and starting it again would
    replace it."""
    instance_id = str(start.instance)
    existing = await client.get_status(instance_id)
    if existing is not None and existing.runtime_status is not None:
        return
    settings = bootstrap.services().settings
    await client.start_new(
        ORCHESTRATOR,
        instance_id=instance_id,
        client_input=compensation_input(
            record, start.instance, start.undo, settings.agent_transport, settings.timeouts
        ),
        version=orchestration_version(record.workflow_version),
    )
    log.info("compensation started", instance_id=instance_id, steps_to_undo=len(start.undo))
