"""The supervisor's timer trigger (U1-U7).

Each tick runs one bounded sweep (window, item cap, page cap, continuation tokens; U2) and
logs what it read, wrote and spent. Recoveries are conditional updates on the expired
LockedBy (U4, U6): retries go back to the starter, give-ups get an operator alert and a
``failed`` status. The cadence is SUPERVISOR_SCHEDULE (U7).
"""

from __future__ import annotations

import asyncio
import logging

import azure.durable_functions as df
import azure.functions as func

import bootstrap
from domain.outgoing_messages import alert_outgoing, status_outgoing
from services.supervisor import RecoveryKind, sweep

bp = df.Blueprint()
log = logging.getLogger("app.supervisor")


@bp.timer_trigger(schedule="%SUPERVISOR_SCHEDULE%", arg_name="timer")
async def supervise_orders(timer: func.TimerRequest) -> None:
    app = bootstrap.services()
    report = await asyncio.to_thread(
        sweep,
        app.states,
        bootstrap.now(),
        policy=app.settings.supervisor_policy,
        timeouts=app.settings.timeouts,
        reply_queues=app.settings.reply_queues,
    )
    publisher = bootstrap.publisher()
    for recovery in report.recoveries:
        if recovery.alert is not None:
            await publisher.send(alert_outgoing(recovery.alert, app.settings.operator_alerts_queue))
        if recovery.status is not None:
            await publisher.send(status_outgoing(recovery.status))
        if recovery.compensation_instance is not None:
            log.error(
                "compensation requested but this workflow has no compensable step order=%s",
                recovery.record.order_id,
            )
    log.info(
        "sweep window_start=%s pages=%d items_read=%d writes=%d lost_races=%d "
        "request_charge=%.2f stopped=%s retries=%d long_waits=%d gave_up=%d",
        report.window_start.isoformat(),
        report.pages,
        report.items_read,
        report.writes,
        report.lost_races,
        report.request_charge,
        report.stopped,
        report.count(RecoveryKind.RETRY),
        report.count(RecoveryKind.RETRY_AFTER_LONG_WAIT),
        report.count(RecoveryKind.GAVE_UP),
    )
