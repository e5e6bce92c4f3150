"""timerTrigger: NCRONTAB schedules, run_on_startup and the past-due flag (U7 cadence).

One invocation at a time per function, as on the host (timer functions are singletons). An
occurrence missed while the devhost was down fires once at start-up with ``past_due`` set;
occurrences missed because an invocation ran long are skipped, not queued. A failing
invocation is logged and the schedule goes on.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

from azure.functions import meta
from azure.functions.timer import TimerRequestConverter

from devhost.clock import Clock
from devhost.indexing import IndexedFunction
from devhost.invocation import FunctionInvoker
from devhost.ncrontab import CronSchedule
from devhost.schedule_monitor import ScheduleMonitor, ScheduleStatus

log = logging.getLogger("devhost.timer")

# A wake-up this much later than its occurrence means the host could not keep up (a suspended
# machine, a blocked loop): the function is told it runs past due.
PAST_DUE_GRACE = dt.timedelta(seconds=5)


class TimerTrigger:
    def __init__(
        self,
        function: IndexedFunction,
        invoker: FunctionInvoker,
        clock: Clock,
        monitor: ScheduleMonitor,
    ) -> None:
        self._function = function
        self._invoker = invoker
        self._clock = clock
        self._monitor = monitor
        self._schedule = CronSchedule.parse(str(function.trigger["schedule"]))
        self.firing = False

    @property
    def name(self) -> str:
        return self._function.name

    async def run(self) -> None:
        status = self._monitor.load(self.name)
        last = status.last if status else None
        if status is not None and status.next < self._clock.now():
            last = await self._fire(status.next, last, past_due=True)
        elif self._function.trigger.get("runOnStartup"):
            last = await self._fire(self._clock.now(), last, past_due=False)
        while True:
            due = self._schedule.next_after(self._clock.now())
            self._monitor.save(self.name, ScheduleStatus(last, due, self._clock.now()))
            await self._clock.sleep_until(due)
            last = await self._fire(due, last, past_due=self._clock.now() - due > PAST_DUE_GRACE)

    async def _fire(
        self, occurrence: dt.datetime, last: dt.datetime | None, *, past_due: bool
    ) -> dt.datetime:
        upcoming = self._schedule.next_after(occurrence)
        status = ScheduleStatus(last, upcoming, self._clock.now())
        payload = {
            "Schedule": {"AdjustForDST": True},
            "ScheduleStatus": status.as_binding_data(),
            "IsPastDue": past_due,
        }
        request = TimerRequestConverter.decode(
            meta.Datum(json.dumps(payload), "json"), trigger_metadata={}
        )
        if past_due:
            log.warning("timer past due function=%s occurrence=%s", self.name, occurrence)
        self.firing = True
        try:
            await self._invoker.invoke(
                self._function, {str(self._function.trigger["name"]): request}
            )
        except Exception:
            log.warning("timer invocation failed function=%s; the schedule goes on", self.name)
        finally:
            self.firing = False
        return occurrence
