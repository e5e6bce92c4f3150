"""Submission's Service Bus trigger on ORDERS_QUEUE (S1-S4, C5, C6, R1).

`receive_order` settles its message itself (PeekLock, S1): accepted, or refused at the
backlog bound (C5), it sends the status `services.submission` built and completes; invalid
or conflicting, it alerts an operator and dead-letters with the reason (S3). A store or
broker fault raises, and the redelivery repeats the idempotent writes (C6). An accepted order
starts at once, before the message is settled, within the running cap and claimed as the
starter claims (D3, C5); a claim or start that fails leaves it to the starter and never fails
the message.
"""

from __future__ import annotations

import azure.durable_functions as df
from azurefunctions.extensions.bindings.servicebus import (
    ServiceBusMessageActions,
    ServiceBusReceivedMessage,
)
from opentelemetry.trace import Span

import bootstrap
from activities.replies import send_alert, send_statuses
from activities.starter import give_back, start_claimed
from adapters import blocking_calls
from adapters.message_bodies import NotADataBody, data_body
from adapters.message_settlement import complete, dead_letter
from observability import logs
from observability.tracing import annotate, current_traceparent, order_span
from services.starter import Claim, claim_accepted
from services.submission import Accepted, DeadLetter, Rejected, submit_order, unreadable_submission

bp = df.Blueprint()
log = logs.get_logger("app.submission")


@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%ORDERS_QUEUE%",
    connection="ServiceBusConnection",
    auto_complete_messages=False,
)
@bp.durable_client_input(client_name="client")
async def receive_order(
    message: ServiceBusReceivedMessage,
    message_actions: ServiceBusMessageActions,
    client: df.DurableOrchestrationClient,
) -> None:
    with order_span("order.submission") as span:
        await _receive_order(message, message_actions, client, span)


async def _receive_order(
    message: ServiceBusReceivedMessage,
    message_actions: ServiceBusMessageActions,
    client: df.DurableOrchestrationClient,
    span: Span,
) -> None:
    app = bootstrap.services()
    message_id = str(message.message_id)
    try:
        body = data_body(message)
    except NotADataBody as error:
        result: DeadLetter | Rejected | Accepted = unreadable_submission(
            str(error), message_id=message_id, now=bootstrap.now()
        )
    else:
        result, claim = await blocking_calls.run(_submit_and_claim, app, body, message)
    if isinstance(result, DeadLetter):
        # The description names fields and problems, never values (C3), so it is safe to log.
        log.warning(
            "submission dead-lettered",
            message_id=str(message.message_id),
            reason=result.reason,
            description=result.description,
        )
        await send_alert(result.alert)
        await dead_letter(
            message_actions, message, reason=result.reason, description=result.description
        )
        return
    annotate(span, order_id=result.order.order_id)
    if result.status is not None:
        try:
            await send_statuses((result.status,))
        except BaseException:
            if claim is not None:
                await give_back(claim)
            raise
    if claim is not None:
        # Before the message is settled: a redelivery finds the order running, not a claim
        # that nothing will start.
        await start_claimed(client, claim)
    await complete(message_actions, message)
    if isinstance(result, Rejected):
        # Identifiers and counts only: the order's customer and items stay out of the log.
        log.warning(
            "order rejected",
            order_id=result.order.order_id,
            backlog=result.backlog,
            bound=result.bound,
        )
        return
    log.info(
        "order received",
        order_id=result.order.order_id,
        state_created=result.state_created,
        retired=result.retired,
        started=claim is not None,
    )


def _submit_and_claim(
    app: bootstrap.AppServices, body: bytes, message: ServiceBusReceivedMessage
) -> tuple[Accepted | Rejected | DeadLetter, Claim | None]:
    """`submit_order`, then the claim of the record it stored, in one blocking call so that
    the starter's scan rarely finds the record between the two (D3, C5). A claim that fails
    is logged and leaves the record to the starter."""
    result = submit_order(
        body,
        reply_to=message.reply_to,
        message_id=str(message.message_id),
        orders=app.orders,
        states=app.states,
        admission=app.admission,
        reply_queues=app.settings.reply_queues,
        now=bootstrap.now(),
        steps=app.settings.order_steps,
        trace_parent=current_traceparent(),
        budget=app.settings.budget,
    )
    if not isinstance(result, Accepted) or result.retired:
        return result, None
    try:
        claim = claim_accepted(
            app.states,
            result.record,
            bootstrap.now(),
            timeouts=app.settings.timeouts,
            running=app.running,
        )
    except Exception:
        # The record is stored: still Pending, or claimed with a deadline the supervisor
        # watches; the starter's tick or a recovery starts it.
        log.exception("could not claim the order it accepted", order_id=result.order.order_id)
        return result, None
    return result, claim
