"""The dead-letter watcher's timer trigger (S3, E8, DLQ with metadata for triage).

Each tick of `watch_dead_letter_queues` alerts once per dead letter not reported before, of
every queue the app consumes (`services.dead_letters.watch_dead_letters`). A queue it could
not read fails the invocation after the others were watched, and the next tick looks at it
again. The cadence is DEADLETTER_WATCH_SCHEDULE.
"""

from __future__ import annotations

import azure.durable_functions as df
import azure.functions as func

import bootstrap
from adapters import blocking_calls
from observability import logs
from services.dead_letters import watch_dead_letters

bp = df.Blueprint()
log = logs.get_logger("app.dead_letters")


class DeadLetterWatchFailed(RuntimeError):
    """Some queues could not be watched this tick (each was logged with its error)."""


@bp.timer_trigger(schedule="%DEADLETTER_WATCH_SCHEDULE%", arg_name="timer")
async def watch_dead_letter_queues(timer: func.TimerRequest) -> None:
    app = bootstrap.services()
    report = await watch_dead_letters(
        bootstrap.dead_letter_queues(),
        app.states,
        bootstrap.publisher(),
        consumed=app.settings.consumed_queues,
        alerts_queue=app.settings.operator_alerts_queue,
        now=bootstrap.now(),
        blocking=blocking_calls.run,
    )
    log.info(
        "dead-letter watch",
        queues=len(app.settings.consumed_queues),
        new=len(report.new),
        failed=len(report.failed),
    )
    if report.failed:
        raise DeadLetterWatchFailed(
            f"could not watch the dead letters of {', '.join(report.failed)}"
        )
