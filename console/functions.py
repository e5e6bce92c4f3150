"""The operator console's HTTP functions (E8, C2, C4): a thin face over `services.operator`
and `services.dead_letters`.

Function-key auth, then the caller's role (`domain.operator_access`: read to look, act to
change; 401 or 403 otherwise, and every action's log line names who acted); JSON in and out,
under ``api/console/...`` (Azure reserves routes that start with ``admin``); the service
layer's refusals become 400, 404, 409 or 503 (`_answer`).
An action that starts a compensation answers 202 with the instance it started, which runs
the order's own workflow version (C7). Routes and answers: docs/console.md.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import azure.durable_functions as df
import azure.functions as func

import bootstrap
from activities.replies import deliver_owed
from adapters import blocking_calls
from domain.contracts import text_problem
from domain.dead_letters import DeadLetter
from domain.operator_access import Caller, Denied, Role, authorise
from domain.ports import (
    DeadLetterBusy,
    InvalidContinuation,
    PreconditionFailed,
    RecordNotFound,
    StoreUnavailable,
)
from domain.records import ProcessState
from domain.transitions import IllegalTransition
from observability import logs
from orchestrators.order_workflow import STATUS_SENDERS
from services import dead_letters, operator
from services.owed_statuses import owed_statuses

bp = df.Blueprint()
log = logs.get_logger("app.console")

AUTH = func.AuthLevel.FUNCTION
PAGE = Path(__file__).with_name("page.html")
DEFAULT_PAGE_SIZE = 50
MAX_REASON_LENGTH = 500
HISTORY_FIELDS = (
    "EventType",
    "Timestamp",
    "Name",
    "FunctionName",
    "EventId",
    "TaskScheduledId",
    "FireAt",
    "TimerId",
    "OrchestrationStatus",
    "Reason",
)
"""What the console shows of a history event: never its inputs or results, which may carry
the order's data (C3)."""


class BadRequest(ValueError):
    """The request itself is wrong: a 400."""


def _json(body: Any, status: int = 200) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps(body), status_code=status, mimetype="application/json", charset="utf-8"
    )


def _error(status: int, message: str) -> func.HttpResponse:
    return _json({"error": message}, status)


def _caller(req: func.HttpRequest, needed: Role) -> Caller:
    """Who calls, if they hold `needed`; `Denied` otherwise."""
    settings = bootstrap.services().settings
    headers = {name.lower(): value for name, value in req.headers.items()}
    try:
        return authorise(headers, needed, mode=settings.console_auth, keys=settings.console_keys)
    except Denied as denied:
        log.warning(
            "console call refused", status=denied.status, by=denied.who, path=urlsplit(req.url).path
        )
        raise


async def _answer(action: Callable[[], Awaitable[func.HttpResponse]]) -> func.HttpResponse:
    """Run `action`, mapping the caller's and the service layer's refusals to HTTP statuses."""
    try:
        return await action()
    except Denied as denied:
        return _error(denied.status, denied.reason)
    except (RecordNotFound, dead_letters.UnknownQueue) as error:
        return _error(404, str(error))
    except (PreconditionFailed, IllegalTransition, DeadLetterBusy) as error:
        return _error(409, str(error))
    except (BadRequest, InvalidContinuation) as error:
        return _error(400, str(error))
    except StoreUnavailable as error:
        return _error(503, str(error))


def _body(req: func.HttpRequest) -> dict[str, Any]:
    raw = req.get_body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError as error:
        raise BadRequest(f"the body is not JSON: {error}") from error
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _etag(body: dict[str, Any]) -> str | None:
    etag = body.get("etag")
    if etag is not None and not isinstance(etag, str):
        raise BadRequest("etag must be a string")
    return etag


@bp.route(route="console", methods=["GET"], auth_level=AUTH)
def console_page(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse(
        PAGE.read_bytes(),
        mimetype="text/html",
        charset="utf-8",
        headers={
            "Content-Security-Policy": (
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
            ),
            "Cache-Control": "no-store",
        },
    )


@bp.route(route="console/orders", methods=["GET"], auth_level=AUTH)
async def console_list_orders(req: func.HttpRequest) -> func.HttpResponse:
    async def act() -> func.HttpResponse:
        _caller(req, Role.READ)
        text = req.params.get("state") or ProcessState.ERROR.value
        try:
            state = ProcessState(text)
        except ValueError as error:
            raise BadRequest(
                f"state {text!r} is not one of {', '.join(s.value for s in ProcessState)}"
            ) from error
        try:
            page_size = int(req.params.get("pageSize") or DEFAULT_PAGE_SIZE)
        except ValueError as error:
            raise BadRequest("pageSize must be a whole number") from error
        if page_size < 1:
            raise BadRequest("pageSize must be 1 or more")
        states = bootstrap.services().states
        page = await blocking_calls.run(
            operator.list_orders,
            states,
            state,
            page_size=page_size,
            continuation=req.params.get("continuation") or None,
        )
        return _json(operator.list_view(page, state))

    return await _answer(act)


@bp.route(route="console/orders/{order_id}", methods=["GET"], auth_level=AUTH)
@bp.durable_client_input(client_name="client")
async def console_show_order(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    async def act() -> func.HttpResponse:
        _caller(req, Role.READ)
        order_id = req.route_params["order_id"]
        timeline = await blocking_calls.run(
            operator.order_timeline, bootstrap.services().states, order_id
        )
        orchestrations = {
            str(instance): await _orchestration(client, str(instance), with_history=True)
            for instance in timeline.attempts
        }
        owed = owed_statuses(
            timeline.record,
            timeline.attempts,
            orchestrations,
            senders=STATUS_SENDERS,
            reply_queues=bootstrap.services().settings.reply_queues,
        )
        return _json(operator.timeline_view(timeline, orchestrations, owed))

    return await _answer(act)


async def _orchestration(
    client: df.DurableOrchestrationClient, instance_id: str, *, with_history: bool
) -> dict[str, Any] | None:
    """What the durable client says of one instance; None when it has no such instance.
    Inputs and activity outputs stay out: they may carry the order's data (C3)."""
    status = await client.get_status(
        instance_id, show_history=with_history, show_history_output=False, show_input=False
    )
    if status is None or status.runtime_status is None:
        return None
    view: dict[str, Any] = status.to_json()
    view.pop("input", None)
    # The host answers with ``historyEvents``, which the SDK keeps as an attribute of that
    # name rather than as ``history``.
    history = getattr(status, "historyEvents", None) or status.history
    if with_history:
        view["history"] = [
            {name: event[name] for name in HISTORY_FIELDS if name in event}
            for event in history or []
            if isinstance(event, dict)
        ]
    return view


@bp.route(route="console/orders/{order_id}/resubmit", methods=["POST"], auth_level=AUTH)
async def console_resubmit(req: func.HttpRequest) -> func.HttpResponse:
    async def act() -> func.HttpResponse:
        caller = _caller(req, Role.ACT)
        order_id = req.route_params["order_id"]
        app = bootstrap.services()
        record = await blocking_calls.run(
            operator.resubmit_order,
            app.states,
            order_id,
            bootstrap.now(),
            expected_etag=_etag(_body(req)),
        )
        log.info(
            "operator resubmitted", order_id=order_id, resubmits=record.resubmits, by=caller.name
        )
        return _json({"record": operator.record_view(record)})

    return await _answer(act)


@bp.route(route="console/orders/{order_id}/retry-compensation", methods=["POST"], auth_level=AUTH)
@bp.durable_client_input(client_name="client")
async def console_retry_compensation(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    async def act() -> func.HttpResponse:
        caller = _caller(req, Role.ACT)
        order_id = req.route_params["order_id"]
        app = bootstrap.services()
        request = await blocking_calls.run(
            operator.retry_compensation,
            app.states,
            order_id,
            bootstrap.now(),
            timeouts=app.settings.timeouts,
            expected_etag=_etag(_body(req)),
        )
        log.info("operator retried compensation", instance_id=request.instance, by=caller.name)
        return await _start_compensation(client, request, terminate_superseded=False)

    return await _answer(act)


@bp.route(route="console/orders/{order_id}/cancel", methods=["POST"], auth_level=AUTH)
@bp.durable_client_input(client_name="client")
async def console_cancel(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    async def act() -> func.HttpResponse:
        caller = _caller(req, Role.ACT)
        order_id = req.route_params["order_id"]
        body = _body(req)
        reason = body.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise BadRequest('a cancel needs a reason: {"reason": "..."}')
        # The reason becomes the record's LastError: what no store can keep is refused here.
        problem = text_problem("the reason", reason, max_length=MAX_REASON_LENGTH)
        if problem is not None:
            raise BadRequest(problem)
        app = bootstrap.services()
        request = await blocking_calls.run(
            operator.cancel_order,
            app.states,
            order_id,
            bootstrap.now(),
            timeouts=app.settings.timeouts,
            reason=reason.strip(),
            expected_etag=_etag(body),
        )
        log.info(
            "operator cancelled",
            instance_id=request.instance,
            superseded=request.superseded,
            by=caller.name,
        )
        return await _start_compensation(client, request, terminate_superseded=True)

    return await _answer(act)


async def _start_compensation(
    client: df.DurableOrchestrationClient,
    request: operator.CompensationRequest,
    *,
    terminate_superseded: bool,
) -> func.HttpResponse:
    """Start the compensation instance the action won (C1, C2, C7): the record's outbox
    owes it, so if the start fails the supervisor's relay starts it (C6)."""
    started = True
    try:
        await deliver_owed(request.record, client)
    except Exception:
        started = False
        log.exception("could not start compensation", instance_id=request.instance)
    if terminate_superseded and request.superseded is not None:
        try:
            await client.terminate(request.superseded, "cancelled by an operator")
        except Exception:
            log.warning("could not terminate superseded instance", superseded=request.superseded)
    view = operator.compensation_view(request)
    view["compensationStarted"] = started
    if not started:
        view["note"] = (
            "the compensation instance did not start; the supervisor's sweep starts it once "
            "OUTBOX_GRACE_SECONDS have passed"
        )
    return _json(view, 202)


# --- dead-letter triage ---------------------------------------------------------------------


def _dead_letter_view(letter: DeadLetter) -> dict[str, Any]:
    return {
        "queue": letter.queue,
        "sequenceNumber": letter.sequence_number,
        "messageId": letter.message_id,
        "reason": letter.reason,
        "description": letter.description,
        "enqueuedAt": None if letter.enqueued_at is None else letter.enqueued_at.isoformat(),
        "deliveryCount": letter.delivery_count,
        "orderId": letter.order_id,
        "bodyPreview": letter.body_preview,
        "applicationProperties": dict(letter.application_properties),
    }


def _whole(text: str | None, name: str, default: int) -> int:
    try:
        return default if not text else int(text)
    except ValueError as error:
        raise BadRequest(f"{name} must be a whole number") from error


@bp.route(route="console/dead-letters", methods=["GET"], auth_level=AUTH)
async def console_dead_letter_queues(req: func.HttpRequest) -> func.HttpResponse:
    async def act() -> func.HttpResponse:
        _caller(req, Role.READ)
        return _json({"queues": list(bootstrap.services().settings.consumed_queues)})

    return await _answer(act)


@bp.route(route="console/dead-letters/{queue}", methods=["GET"], auth_level=AUTH)
async def console_list_dead_letters(req: func.HttpRequest) -> func.HttpResponse:
    async def act() -> func.HttpResponse:
        _caller(req, Role.READ)
        queue = req.route_params["queue"]
        after = _whole(req.params.get("after"), "after", 0)
        count = _whole(req.params.get("max"), "max", DEFAULT_PAGE_SIZE)
        if count < 1:
            raise BadRequest("max must be 1 or more")
        letters = await dead_letters.list_dead_letters(
            bootstrap.dead_letter_queues(),
            queue,
            consumed=bootstrap.services().settings.consumed_queues,
            after_sequence=after,
            max_count=count,
        )
        return _json({"queue": queue, "deadLetters": [_dead_letter_view(d) for d in letters]})

    return await _answer(act)


@bp.route(
    route="console/dead-letters/{queue}/{sequence:int}/{action:alpha}",
    methods=["POST"],
    auth_level=AUTH,
)
async def console_act_on_dead_letter(req: func.HttpRequest) -> func.HttpResponse:
    async def act() -> func.HttpResponse:
        caller = _caller(req, Role.ACT)
        queue, action = req.route_params["queue"], req.route_params["action"]
        sequence = _whole(req.route_params["sequence"], "sequence", 0)
        chosen = {
            "resubmit": dead_letters.resubmit_dead_letter,
            "discard": dead_letters.discard_dead_letter,
        }.get(action)
        if chosen is None:
            raise BadRequest(f"no dead-letter action {action!r}: resubmit or discard")
        done = await chosen(
            bootstrap.dead_letter_queues(),
            queue,
            sequence,
            consumed=bootstrap.services().settings.consumed_queues,
        )
        if not done:
            return _error(
                409,
                f"dead letter {sequence} of {queue!r} is gone: another operator resubmitted "
                f"or discarded it",
            )
        log.info(
            "operator acted on dead letter",
            action=action,
            queue=queue,
            sequence=sequence,
            by=caller.name,
        )
        return _json({"queue": queue, "sequenceNumber": sequence, "action": action, "done": True})

    return await _answer(act)
