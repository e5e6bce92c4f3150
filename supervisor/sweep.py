"""The supervisor's timer triggers: the sweep and its catch-up (U1-U7, C1, C2, C3, C6).

`supervise_orders` (SUPERVISOR_SCHEDULE) runs one bounded sweep, then one bounded retirement
of finished orders past their retention (`services.retention`); `catch_up_orders`
(SUPERVISOR_CATCHUP_SCHEDULE) one catch-up (`services.supervisor`); each logs what it read,
wrote and spent, and delivers what the recoveries it won owe: their statuses and alerts,
then their compensation instances, each under its order's trace (C9). The sweep then relays
what older outboxes still owe (`services.outbox.owed_scan`, OUTBOX_GRACE_SECONDS).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import azure.durable_functions as df
import azure.functions as func

import bootstrap
from activities.replies import deliver_owed
from adapters import blocking_calls
from domain.records import StateRecord
from observability import logs
from observability.tracing import order_span
from services.outbox import OwedScan, owed_scan
from services.retention import retire_finished
from services.supervisor import RecoveryKind, SweepReport, catch_up, sweep

bp = df.Blueprint()
log = logs.get_logger("app.supervisor")


@bp.timer_trigger(schedule="%SUPERVISOR_SCHEDULE%", arg_name="timer")
@bp.durable_client_input(client_name="client")
async def supervise_orders(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    report = await _scan_and_recover(sweep, client)
    relayed = await _relay(client)
    log.info(
        "sweep",
        **_cost(report),
        retries=report.count(RecoveryKind.RETRY),
        long_waits=report.count(RecoveryKind.RETRY_AFTER_LONG_WAIT),
        gave_up=report.count(RecoveryKind.GAVE_UP),
        compensations=report.count(RecoveryKind.COMPENSATION_REQUESTED)
        + report.count(RecoveryKind.COMPENSATION_RESUMED),
        compensation_failed=report.count(RecoveryKind.COMPENSATION_STALLED),
    )
    log.info(
        "outbox relay",
        pages=relayed.pages,
        items_read=relayed.items_read,
        request_charge=round(relayed.request_charge, 2),
        stopped=relayed.stopped,
        owed=len(relayed.records),
    )
    await _retire_finished(client)


@bp.timer_trigger(schedule="%SUPERVISOR_CATCHUP_SCHEDULE%", arg_name="timer")
@bp.durable_client_input(client_name="client")
async def catch_up_orders(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    report = await _scan_and_recover(catch_up, client)
    for recovery in report.all_recoveries:
        log.warning(
            "catch-up found an overdue order",
            instance_id=recovery.expired_instance or None,
            order_id=recovery.record.order_id,
            requested=recovery.kind.value,
        )
    log.info("catch-up", **_cost(report), overdue=len(report.recoveries))
    beyond = report.beyond_window
    if beyond is not None:
        log.info("catch-up beyond its window", **_cost(beyond), overdue=len(beyond.recoveries))


async def _retire_finished(client: df.DurableOrchestrationClient) -> None:
    """Retire the finished orders past FINISHED_RETENTION_SECONDS (C3): the durable client
    purges the histories of their instances."""
    app = bootstrap.services()

    async def purge(instance_id: str) -> None:
        await client.purge_instance_history(instance_id)

    report = await retire_finished(
        app.states,
        app.orders,
        purge,
        now=bootstrap.now(),
        retention=timedelta(seconds=app.settings.finished_retention_seconds),
        scan=app.settings.supervisor_policy.scan,
        blocking=blocking_calls.run,
    )
    log.info(
        "retirement",
        until=report.until,
        pages=report.pages,
        items_read=report.items_read,
        request_charge=round(report.request_charge, 2),
        stopped=report.stopped,
        retired=report.retired,
        expiry_removed=report.expiry_removed,
        lost_races=report.lost_races,
        failed=report.failed,
    )


def _cost(report: SweepReport) -> dict[str, object]:
    """What one bounded scan looked at and what it cost, as log fields (U2, C9)."""
    return {
        "window_start": report.window_start,
        "window_end": report.window_end,
        "pages": report.pages,
        "items_read": report.items_read,
        "writes": report.writes,
        "lost_races": report.lost_races,
        "request_charge": round(report.request_charge, 2),
        "stopped": report.stopped,
    }


async def _scan_and_recover(
    scan: Callable[..., SweepReport], client: df.DurableOrchestrationClient
) -> SweepReport:
    """Run one bounded `scan` (the sweep or its catch-up) off the event loop with the app's
    settings, then carry out the recoveries it decided."""
    app = bootstrap.services()
    report = await blocking_calls.run(
        scan,
        app.states,
        bootstrap.now(),
        policy=app.settings.supervisor_policy,
        timeouts=app.settings.timeouts,
    )
    await _request_recoveries(report, client)
    return report


async def _request_recoveries(report: SweepReport, client: df.DurableOrchestrationClient) -> None:
    """Deliver what the recoveries of `report` owe - alerts, status messages, then the
    compensations they requested (U4, C1, C2). Each is in its record's outbox already, so
    one that cannot be delivered now is the relay's, and the others still go (C6)."""
    for recovery in report.all_recoveries:
        record = recovery.record
        with order_span(
            "supervisor.recover",
            order_id=record.order_id,
            instance_id=recovery.expired_instance,
            attempt=record.attempt,
            parent=record.trace_parent,
        ) as span:
            span.set_attribute("recovery.kind", recovery.kind.value)
            await _delivered(record, client)


async def _relay(client: df.DurableOrchestrationClient) -> OwedScan:
    """Deliver what outboxes still owe past OUTBOX_GRACE_SECONDS: their committer failed to
    send, crashed, or could not clear them (C6). One bounded scan per sweep (U2)."""
    app = bootstrap.services()
    found = await blocking_calls.run(
        owed_scan,
        app.states,
        bootstrap.now(),
        grace_seconds=app.settings.outbox_grace_seconds,
        bounds=app.settings.supervisor_policy.scan,
    )
    for record in found.records:
        with order_span(
            "supervisor.relay",
            order_id=record.order_id,
            instance_id=record.locked_by,
            attempt=record.attempt,
            parent=record.trace_parent,
        ):
            await _delivered(record, client)
    return found


async def _delivered(record: StateRecord, client: df.DurableOrchestrationClient) -> None:
    """Deliver `record`'s outbox; a send or a start that fails is logged and left to the
    relay, so one order's unreachable reply queue holds up no other (C6)."""
    try:
        await deliver_owed(record, client)
    except Exception:
        log.exception("could not deliver what the order owes", order_id=record.order_id)
