"""The supervisor's timer triggers: the sweep and its catch-up (U1-U7, C1, C2, C3).

`supervise_orders` (SUPERVISOR_SCHEDULE) runs one bounded sweep, then one bounded retirement
of finished orders past their retention (`services.retention`); `catch_up_orders`
(SUPERVISOR_CATCHUP_SCHEDULE) one catch-up (`services.supervisor`); each logs what it read,
wrote and spent, and acts on the recoveries it won: it sends their statuses and alerts and
starts their compensation instances, each under its order's trace (C9).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import azure.durable_functions as df
import azure.functions as func

import bootstrap
from activities.replies import send_alert, send_statuses
from adapters import blocking_calls
from domain.policies import Timeouts
from observability import logs
from observability.tracing import order_span
from orchestrators.order_workflow import ORCHESTRATOR, compensation_input, orchestration_version
from services.retention import retire_finished
from services.supervisor import Recovery, RecoveryKind, SweepReport, catch_up, sweep

bp = df.Blueprint()
log = logs.get_logger("app.supervisor")


@bp.timer_trigger(schedule="%SUPERVISOR_SCHEDULE%", arg_name="timer")
@bp.durable_client_input(client_name="client")
async def supervise_orders(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    report = await _scan_and_recover(sweep, client)
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
    """Send what the recoveries of `report` say - alerts, status messages - and start the
    compensations they requested (U4, C1, C2)."""
    settings = bootstrap.services().settings
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
            for alert in recovery.alerts:
                await send_alert(alert)
            if recovery.status is not None:
                await send_statuses((recovery.status,))
            if recovery.compensation_instance is not None:
                await _start_compensation(
                    client, recovery, settings.agent_transport, settings.timeouts
                )


async def _start_compensation(
    client: df.DurableOrchestrationClient,
    recovery: Recovery,
    agent_transport: str,
    timeouts: Timeouts,
) -> None:
    """Hand the compensation the sweep requested to the Scheduler (U4, C1): an instance of
    the order's workflow that undoes what is left. If the start fails, the record stays
    Compensating with its deadline, and the next sweep finds it stalled and asks again."""
    record, instance = recovery.record, recovery.compensation_instance
    if instance is None:
        return
    try:
        await client.start_new(
            ORCHESTRATOR,
            instance_id=str(instance),
            client_input=compensation_input(
                record, instance, recovery.undo, agent_transport, timeouts
            ),
            version=orchestration_version(record.workflow_version),
        )
    except Exception:
        log.exception("could not start compensation", instance_id=instance)
        return
    log.info("compensation started", instance_id=instance, steps_to_undo=len(recovery.undo))
