"""The broker's AMQP 1.0 endpoint: connections, links, credit, $cbs and $management.

Speaks the Service Bus protocol as the azure-servicebus SDK expects it (per-message work is in
``deliveries``):
- SASL ANONYMOUS, then a ``$cbs`` put-token the broker always accepts (status-code 202);
- an unknown entity is refused on attach (null terminus, then detach with amqp:not-found and the
  service's text: SDK MessagingEntityNotFoundError) unless auto-create is on; a sender to a
  dead-letter queue or a session receiver is refused the same way; max-message-size is advertised
  on every sender's attach;
- messages go to a queue's consumers in turn, as far as their credit allows (prefetch or not), and
  drain requests are honoured;
- management replies go to the reply link of the same session and address, so several clients
  (a sender and a receiver of one queue on one connection) never get each other's answers;
- a link or connection that goes away releases its locks (Queue.release_holder);
- one client's malformed frame or request never stops the IO loop: it is logged and answered.

Timers follow Namespace.next_due() (one pending timer at a time) instead of polling.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from proton import Delivery, Endpoint, Handler, Link, Message, Terminus, symbol, ulong

from devhost.servicebus.deliveries import (
    DECODE_ERROR,
    amqp_error,
    apply_disposition,
    send_message,
    settle,
    take_transfer,
)
from devhost.servicebus.entities import Clock, EntityNotFound, Namespace, Queue
from devhost.servicebus.io_loop import IoLoop, TimerHandle
from devhost.servicebus.link_states import (
    DEAD_LETTER_SUFFIX,
    Consumer,
    LinkState,
    Producer,
    ReplyLink,
    RequestLink,
    attach_state,
    detach_state,
    has_session_filter,
    state_of,
)
from devhost.servicebus.management import (
    INTERNAL_ERROR,
    NOT_ALLOWED,
    NOT_IMPLEMENTED,
    ManagementOperations,
    ManagementResponse,
)
from devhost.servicebus.wire_codec import MalformedMessage, decode_request

logger = logging.getLogger(__name__)

CBS_ADDRESS = "$cbs"
MANAGEMENT_SUFFIX = "/$management"
NOT_FOUND = "amqp:not-found"
MAX_BATCH_SIZE_PROPERTY = symbol("com.microsoft:max-message-batch-size")

# Incoming credit granted to a client's sender; topped up when half is used.
INCOMING_CREDIT = 500
STOP_GRACE_SECONDS = 1.0


def _guarded(method: Callable[[BrokerHandler, Any], None]) -> Callable[[BrokerHandler, Any], None]:
    """Keep the IO loop alive whatever one event does: log it and cut off only that peer."""

    @functools.wraps(method)
    def wrapper(self: BrokerHandler, event: Any) -> None:
        try:
            method(self, event)
        except Exception as exc:
            logger.exception("event=%s error=%r: closing the offending endpoint", event.type, exc)
            self._close_after_error(event, exc)

    return wrapper


class BrokerHandler(Handler):
    """Proton event handler; everything it touches runs on the IO loop thread."""

    def __init__(self, namespace: Namespace, *, clock: Clock) -> None:
        super().__init__()
        self._namespace = namespace
        self._clock = clock
        self._loop: IoLoop | None = None
        self._timer: TimerHandle | None = None
        self._timer_due: int | None = None
        self._consumers: dict[Queue, list[Consumer]] = {}
        self._reply_links: dict[tuple[Any, str], ReplyLink] = {}
        self._links_by_connection: dict[Any, list[LinkState]] = {}
        self._operations: dict[str, ManagementOperations] = {}
        self._stopping = False

    # -- lifecycle (on the loop's thread) -----------------------------------------------------

    def start(self, loop: IoLoop) -> None:
        self._loop = loop
        self._after_change()

    def stop(self) -> None:
        """Close the listener and every connection; the loop ends once they are gone."""
        loop = self._require_loop()
        self._stopping = True
        loop.close_listener()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for connection in list(self._links_by_connection):
            if not connection.state & Endpoint.LOCAL_CLOSED:
                connection.close()
        if self._links_by_connection:
            # A client that never answers the close must not keep the broker from stopping.
            loop.schedule(STOP_GRACE_SECONDS, loop.stop)
        else:
            loop.stop()

    def _on_timer(self) -> None:
        if self._stopping:
            return
        self._timer = None
        self._timer_due = None
        self._namespace.advance()
        self._after_change()

    def _require_loop(self) -> IoLoop:
        if self._loop is None:
            raise RuntimeError("the broker handler has not been started on an IO loop")
        return self._loop

    # -- endpoints --------------------------------------------------------------------------

    @_guarded
    def on_connection_remote_open(self, event: Any) -> None:
        connection = event.connection
        self._links_by_connection.setdefault(connection, [])
        if self._stopping:
            connection.close()
        elif connection.state & Endpoint.LOCAL_UNINIT:
            connection.open()

    @_guarded
    def on_session_remote_open(self, event: Any) -> None:
        if event.session.state & Endpoint.LOCAL_UNINIT:
            event.session.open()

    @_guarded
    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        if link.state & Endpoint.LOCAL_UNINIT:
            self._attach(link)
            self._after_change()

    @_guarded
    def on_link_remote_close(self, event: Any) -> None:
        link = event.link
        condition = link.remote_condition
        if condition is not None:
            logger.info("link=%s closed by client condition=%s", link.name, condition.name)
        if not link.state & Endpoint.LOCAL_CLOSED:
            link.close()
        state = state_of(link)
        if state is not None:
            self._forget_link(state)
            self._after_change()

    @_guarded
    def on_session_remote_close(self, event: Any) -> None:
        session = event.session
        if not session.state & Endpoint.LOCAL_CLOSED:
            session.close()
        self._forget_links(lambda state: state.link.session == session)

    @_guarded
    def on_connection_remote_close(self, event: Any) -> None:
        connection = event.connection
        if not connection.state & Endpoint.LOCAL_CLOSED:
            connection.close()
        self._forget_connection(connection)

    @_guarded
    def on_transport_error(self, event: Any) -> None:
        condition = event.transport.condition
        logger.info(
            "transport error, closing that connection only: %s",
            f"{condition.name}: {condition.description}" if condition else "unknown",
        )

    @_guarded
    def on_transport_closed(self, event: Any) -> None:
        if event.connection is not None:
            self._forget_connection(event.connection)

    # -- attach -----------------------------------------------------------------------------

    def _attach(self, link: Any) -> None:
        if link.is_sender:
            address = link.remote_source.address or ""
        else:
            address = link.remote_target.address or ""
        link.source.address = link.remote_source.address
        link.target.address = link.remote_target.address
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode
        lowered = address.lower()
        if lowered == CBS_ADDRESS:
            self._open_service_link(link, address, None, None)
            return
        is_management = lowered.endswith(MANAGEMENT_SUFFIX)
        entity = address[: -len(MANAGEMENT_SUFFIX)] if is_management else address
        try:
            queue = self._namespace.queue(entity)
        except EntityNotFound as exc:
            self._refuse(link, NOT_FOUND, _not_found_text(exc, entity))
            return
        if is_management:
            operations = self._operations_for(queue)
            self._open_service_link(link, address, queue, operations)
        elif link.is_sender:
            if has_session_filter(link):
                self._refuse(
                    link,
                    NOT_IMPLEMENTED,
                    f"Sessions are not supported by the local broker (entity '{queue.name}').",
                )
                return
            peek_lock = link.remote_snd_settle_mode != Link.SND_SETTLED
            consumer = Consumer(link, address, queue, peek_lock=peek_lock)
            self._register(link, consumer)
            self._consumers.setdefault(queue, []).append(consumer)
            link.open()
            self._pump(queue)
        elif queue.name.lower().endswith(DEAD_LETTER_SUFFIX):
            self._refuse(
                link,
                NOT_ALLOWED,
                f"Cannot send to '{queue.name}': messages reach a dead-letter queue only by "
                "being dead-lettered from its parent queue.",
            )
        else:
            limit = queue.settings.max_message_size
            link.max_message_size = limit
            link.properties = {MAX_BATCH_SIZE_PROPERTY: ulong(limit)}
            self._register(link, Producer(link, address, queue))
            link.open()
            link.flow(INCOMING_CREDIT)

    def _open_service_link(
        self,
        link: Any,
        address: str,
        queue: Queue | None,
        operations: ManagementOperations | None,
    ) -> None:
        if link.is_sender:
            replies = ReplyLink(link, address, queue)
            self._register(link, replies)
            self._reply_links[(link.session, address.lower())] = replies
            link.open()
        else:
            self._register(link, RequestLink(link, address, queue, operations))
            link.open()
            link.flow(INCOMING_CREDIT)

    def _operations_for(self, queue: Queue) -> ManagementOperations:
        operations = self._operations.get(queue.name)
        if operations is None:
            dead_letter_queue = queue.name.lower().endswith(DEAD_LETTER_SUFFIX)
            operations = ManagementOperations(queue, dead_letter_queue=dead_letter_queue)
            self._operations[queue.name] = operations
        return operations

    def _refuse(self, link: Any, condition: str, description: str) -> None:
        """Attach with a null terminus, then detach with the error, as the service does.

        The SDK raises the detach error (e.g. MessagingEntityNotFoundError) only for a link that
        never counted as attached; a full attach followed by a detach reads as a dropped link.
        """
        logger.info("refused link=%s condition=%s: %s", link.name, condition, description)
        (link.source if link.is_sender else link.target).type = Terminus.UNSPECIFIED
        link.open()
        link.condition = amqp_error(condition, description)
        link.close()

    def _register(self, link: Any, state: LinkState) -> None:
        attach_state(link, state)
        self._links_by_connection.setdefault(link.connection, []).append(state)

    # -- detach -----------------------------------------------------------------------------

    def _forget_connection(self, connection: Any) -> None:
        states = self._links_by_connection.pop(connection, [])
        for state in list(states):
            self._forget_link(state)
        if states:
            self._after_change()
        if self._stopping and not self._links_by_connection:
            self._require_loop().stop()

    def _forget_links(self, predicate: Callable[[LinkState], bool]) -> None:
        for states in list(self._links_by_connection.values()):
            for state in list(states):
                if not state.closed and predicate(state):
                    self._forget_link(state)
        self._after_change()

    def _forget_link(self, state: LinkState) -> None:
        if state.closed:
            return
        state.closed = True
        detach_state(state)
        states = self._links_by_connection.get(state.link.connection)
        if states is not None and state in states:
            states.remove(state)
        if isinstance(state, Consumer) and state.queue is not None:
            consumers = self._consumers.get(state.queue, [])
            if state in consumers:
                consumers.remove(state)
            state.queue.release_holder(state)
        elif isinstance(state, RequestLink) and state.queue is not None:
            state.queue.release_holder(state)
        elif isinstance(state, ReplyLink):
            key = (state.link.session, state.address.lower())
            if self._reply_links.get(key) is state:
                del self._reply_links[key]

    # -- credit and dispatch ------------------------------------------------------------------

    @_guarded
    def on_link_flow(self, event: Any) -> None:
        link = event.link
        state = state_of(link)
        if isinstance(state, Consumer) and not state.closed and state.queue is not None:
            self._pump(state.queue)
            if link.drain_mode and link.credit > 0:
                link.drained()
            self._arm_timer()

    def _pump(self, queue: Queue) -> None:
        """Hand available messages to the queue's consumers with credit, one each in turn."""
        consumers = self._consumers.get(queue)
        if not consumers:
            return
        while True:
            delivered = False
            for consumer in consumers:
                if consumer.link.credit <= 0:
                    continue
                if consumer.peek_lock:
                    message = queue.lock_next(consumer)
                else:
                    message = queue.receive_and_delete_next()
                if message is None:
                    return
                send_message(consumer, message)
                delivered = True
            if not delivered:
                return

    def _after_change(self) -> None:
        """Deliver whatever became available and re-arm the timer for the model's next due time."""
        if self._stopping:
            return
        for queue in self._namespace.take_ready():
            self._pump(queue)
        self._arm_timer()

    def _arm_timer(self) -> None:
        due = self._namespace.next_due()
        if due is None or self._loop is None or self._stopping:
            return
        if self._timer is not None and self._timer_due is not None and self._timer_due <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(due - self._clock(), 1) / 1000
        self._timer = self._loop.schedule(delay, self._on_timer)
        self._timer_due = due

    # -- deliveries -------------------------------------------------------------------------

    @_guarded
    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        link = delivery.link
        if link.is_receiver:
            self._on_transfer(link, delivery)
        elif delivery.updated:
            state = state_of(link)
            if isinstance(state, Consumer):
                apply_disposition(state, delivery)
            else:
                delivery.settle()
        self._after_change()

    def _on_transfer(self, link: Any, delivery: Any) -> None:
        if delivery.aborted:
            delivery.settle()
            return
        if not delivery.readable or delivery.partial:
            return
        raw = link.recv(delivery.pending)
        link.advance()
        state = state_of(link)
        if isinstance(state, Producer) and state.queue is not None:
            take_transfer(state.queue, delivery, raw)
        elif isinstance(state, RequestLink):
            self._answer(state, delivery, raw)
        else:
            settle(delivery, Delivery.REJECTED, amqp_error(NOT_FOUND, "The link is not attached."))
        if link.credit < INCOMING_CREDIT // 2 and not link.state & Endpoint.LOCAL_CLOSED:
            link.flow(INCOMING_CREDIT - link.credit)

    def _answer(self, requests: RequestLink, delivery: Any, raw: bytes) -> None:
        try:
            request = decode_request(raw)
        except MalformedMessage as exc:
            settle(delivery, Delivery.REJECTED, amqp_error(DECODE_ERROR, str(exc)))
            return
        replies = self._reply_links.get((delivery.link.session, requests.address.lower()))
        if replies is None:
            settle(
                delivery,
                Delivery.REJECTED,
                amqp_error(
                    "amqp:precondition-failed",
                    f"Attach a receiver link on '{requests.address}' in the same session "
                    "before sending requests: the response has nowhere to go.",
                ),
            )
            return
        settle(delivery, Delivery.ACCEPTED)
        if requests.operations is None:
            # $cbs put-token: the local broker trusts every token, like the emulator.
            response = Message(
                body=None,
                properties={"status-code": 202, "status-description": "Accepted"},
            )
        else:
            operation = str(request.application_properties.get("operation") or "")
            try:
                result = requests.operations.handle(operation, request.body, requests)
            except Exception as exc:
                logger.exception("operation=%s on %s failed", operation, requests.address)
                result = ManagementResponse(
                    500, f"The local broker failed: {exc!r}", error_condition=INTERNAL_ERROR
                )
            response = _management_response(result)
        response.correlation_id = request.message_id
        if request.reply_to is not None:
            response.address = request.reply_to
        reply = replies.link.send(response)
        reply.settle()

    # -- errors -----------------------------------------------------------------------------

    def _close_after_error(self, event: Any, exc: Exception) -> None:
        condition = amqp_error(INTERNAL_ERROR, f"The local broker failed: {exc!r}")
        try:
            delivery = getattr(event, "delivery", None)
            if delivery is not None and not delivery.settled and delivery.link.is_receiver:
                settle(delivery, Delivery.REJECTED, condition)
                return
            link = getattr(event, "link", None)
            if link is not None and not link.state & Endpoint.LOCAL_CLOSED:
                link.condition = condition
                link.close()
                state = state_of(link)
                if state is not None:
                    self._forget_link(state)
        except Exception:
            logger.exception("could not report the failure to the client")


def _management_response(result: ManagementResponse) -> Message:
    properties: dict[str, Any] = {
        "statusCode": result.status_code,
        "statusDescription": result.description,
    }
    if result.error_condition is not None:
        properties["errorCondition"] = symbol(result.error_condition)
    return Message(body=result.body, properties=properties)


def _not_found_text(exc: EntityNotFound, entity: str) -> str:
    name = entity.split("://", 1)[1].partition("/")[2] if "://" in entity else entity
    return (
        f"{exc} To know more visit https://aka.ms/sbResourceMgrExceptions. "
        f"(local broker: add queue '{name}' to its Config.json, or start it with --auto-create)"
    )
