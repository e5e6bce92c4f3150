"""The supervisor's sweep and its catch-up (U1-U7, C2, C3, C4): `sweep` and `catch_up`.

Each expired record found is recovered by one conditional replace on the etag it was read
with (U4, U6) and returned as a `Recovery` in the `SweepReport`: a retry through the starter,
a give-up, or compensation, for the caller to send and start; the supervisor never does the
work itself, and asks for none that the order's retry budget could not pay for (C4). What a
recovery owes (statuses, alerts, the compensation start) is stored in the record's outbox by
that same replace (C6, `services.outbox`). The retirement of finished orders is
`services.retention`. Design: docs/architecture.md, "The supervisor: windows and catch-up".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from domain import transitions
from domain.contracts import AlertKind, OperatorAlert, OrderStatus, StatusMessage
from domain.policies import (
    GiveUp,
    SupervisorPolicy,
    Timeouts,
    beyond_catch_up_window_end,
    catch_up_window,
    compensation_deadline,
    supervisor_decision,
    sweep_window_start,
)
from domain.ports import Page, PreconditionFailed, StateStore
from domain.records import InstanceId, OwedMessage, ProcessState, StateRecord, format_utc
from domain.workflow import Step
from observability import metrics
from services.outbox import (
    messages,
    owed_alert,
    owed_compensation,
    owed_status,
    owing,
)
from services.paging import BoundedScan, StopReason
from services.status import left_to_undo
from services.steps import count_if_finished


class Scan(StrEnum):
    """Which of the supervisor's scans read a record: its `scan` metric attribute (C9)."""

    SWEEP = "sweep"
    CATCH_UP = "catch-up"
    BEYOND_WINDOW = "beyond-window"


class RecoveryKind(StrEnum):
    RETRY = "retry"
    RETRY_AFTER_LONG_WAIT = "retry-after-long-wait"
    GAVE_UP = "gave-up"
    COMPENSATION_REQUESTED = "compensation-requested"
    COMPENSATION_RESUMED = "compensation-resumed"
    COMPENSATION_STALLED = "compensation-stalled"


@dataclass(frozen=True)
class Recovery:
    """One recovery this sweep won, and what it owes: `owed`, stored in the record's outbox
    by the write that won it (C6). Send `status` and every alert of `alerts` when set; start
    the compensation orchestration `compensation_instance` with `undo` when set (C1, C2)."""

    kind: RecoveryKind
    expired_instance: str
    record: StateRecord
    owed: tuple[OwedMessage, ...] = ()

    @property
    def status(self) -> StatusMessage | None:
        statuses = messages(self.record, self.owed).statuses
        return statuses[0] if statuses else None

    @property
    def alert(self) -> OperatorAlert | None:
        """The recovery's own alert: an order given up, a compensation stalled."""
        return next((a for a in self.alerts if a.body["kind"] != AlertKind.ORDER_OVERDUE), None)

    @property
    def overdue_alert(self) -> OperatorAlert | None:
        """Set when the catch-up found the record past the sweep window, or past its own (U2)."""
        return next((a for a in self.alerts if a.body["kind"] == AlertKind.ORDER_OVERDUE), None)

    @property
    def alerts(self) -> tuple[OperatorAlert, ...]:
        """Every operator alert of this recovery: the recovery's own, then `overdue_alert`."""
        return messages(self.record, self.owed).alerts

    @property
    def compensation_instance(self) -> InstanceId | None:
        start = messages(self.record, self.owed).compensation
        return None if start is None else start.instance

    @property
    def undo(self) -> tuple[Step, ...]:
        """For a compensation instance: what it undoes, in order (C1)."""
        start = messages(self.record, self.owed).compensation
        return () if start is None else start.undo


@dataclass(frozen=True)
class SweepReport:
    """What one sweep (or catch-up) did and cost (U2): the CompleteBy range it looked at,
    `window_start` to `window_end`, both included (no `window_start`: however old).

    A catch-up's report is that of its window; what its last scan, beyond the window, did
    and cost is `beyond_window`. `all_recoveries` are both together."""

    window_start: datetime | None
    window_end: datetime
    now: datetime
    pages: int
    items_read: int
    writes: int
    lost_races: int
    request_charge: float
    stopped: StopReason | None
    recoveries: tuple[Recovery, ...]
    beyond_window: SweepReport | None = None
    """The catch-up's scan of the deadlines older than its window (U2); None for a sweep."""

    @property
    def all_recoveries(self) -> tuple[Recovery, ...]:
        """The recoveries of this scan, then those of `beyond_window`: everything to send."""
        beyond = () if self.beyond_window is None else self.beyond_window.all_recoveries
        return self.recoveries + beyond

    def count(self, kind: RecoveryKind) -> int:
        return sum(1 for recovery in self.all_recoveries if recovery.kind is kind)


def sweep(
    states: StateStore,
    now: datetime,
    *,
    policy: SupervisorPolicy,
    timeouts: Timeouts,
) -> SweepReport:
    """Run one bounded sweep at `now` (U1, U2, U4, U5, U6, C2).

    A give-up that starts compensation gets the compensation deadline of `timeouts`.
    """
    window_start = sweep_window_start(now, policy)
    return _recover_expired(
        lambda size, token: states.query_expired(
            window_start=window_start, now=now, page_size=size, continuation=token
        ),
        Scan.SWEEP,
        states,
        now,
        window_start,
        now,
        policy=policy,
        timeouts=timeouts,
    )


def catch_up(
    states: StateStore,
    now: datetime,
    *,
    policy: SupervisorPolicy,
    timeouts: Timeouts,
) -> SweepReport:
    """Run one bounded catch-up at `now` over the deadlines older than the sweep window,
    then one bounded scan of the state records over every deadline older than the catch-up
    window (U2): each record found is recovered as `sweep` would (U4, U5, U6, C2) and
    carries an `order-overdue` alert (`Recovery.overdue_alert`). The beyond-window scan's
    part is the report's `beyond_window`."""
    window_start, window_end = catch_up_window(now, policy)
    report = _recover_expired(
        lambda size, token: states.query_expired(
            window_start=window_start, now=window_end, page_size=size, continuation=token
        ),
        Scan.CATCH_UP,
        states,
        now,
        window_start,
        window_end,
        policy=policy,
        timeouts=timeouts,
    )
    until = beyond_catch_up_window_end(now, policy)
    beyond = _recover_expired(
        lambda size, token: states.query_expired_until(
            until=until, page_size=size, continuation=token
        ),
        Scan.BEYOND_WINDOW,
        states,
        now,
        None,
        until,
        policy=policy,
        timeouts=timeouts,
    )
    return replace(report, beyond_window=beyond)


def _recover_expired(
    fetch: Callable[[int, str | None], Page[StateRecord]],
    kind_of_scan: Scan,
    states: StateStore,
    now: datetime,
    window_start: datetime | None,
    window_end: datetime,
    *,
    policy: SupervisorPolicy,
    timeouts: Timeouts,
) -> SweepReport:
    """One bounded scan of `fetch`, the records expired with a CompleteBy in [window_start,
    window_end], each recovered with a conditional replace (U2, U4, U6); the catch-up's
    finds get an `order-overdue` alert."""
    scan: BoundedScan[StateRecord] = BoundedScan(
        fetch=fetch,
        page_size=policy.scan.page_size,
        max_items=policy.scan.max_items,
        max_pages=policy.scan.max_pages,
    )
    recoveries: list[Recovery] = []
    writes = lost_races = 0
    for expired in scan:
        if not transitions.is_expired(expired, now):
            continue
        planned, kind = _plan(expired, policy, timeouts, now)
        recovery = _recovery(kind, expired, planned, now)
        if kind_of_scan is not Scan.SWEEP:
            overdue = _overdue_alert(expired, kind, kind_of_scan, policy, now)
            recovery = replace(recovery, owed=(*recovery.owed, overdue))
        writes += 1
        try:
            stored = states.replace(owing(planned, recovery.owed, now=now))
        except PreconditionFailed:
            lost_races += 1
            continue
        _count(kind, expired, stored)
        recoveries.append(replace(recovery, record=stored))
    metrics.supervisor_scanned(
        kind_of_scan.value,
        items_read=scan.items_read,
        request_charge=scan.request_charge,
    )
    return SweepReport(
        window_start=window_start,
        window_end=window_end,
        now=now,
        pages=scan.pages,
        items_read=scan.items_read,
        writes=writes,
        lost_races=lost_races,
        request_charge=scan.request_charge,
        stopped=scan.stopped,
        recoveries=tuple(recoveries),
    )


def _count(kind: RecoveryKind, expired: StateRecord, stored: StateRecord) -> None:
    """The metrics of one recovery this sweep won (C9): the step whose deadline expired, a
    give-up (U5), and the final state a give-up or a stalled compensation reached."""
    if expired.current_step is not None:
        metrics.step_failed(expired.current_step, "deadline-expired")
    if kind is RecoveryKind.GAVE_UP:
        metrics.supervisor_gave_up("error")
    elif kind is RecoveryKind.COMPENSATION_REQUESTED:
        metrics.supervisor_gave_up("compensation")
    count_if_finished(stored)


def _overdue_alert(
    expired: StateRecord,
    kind: RecoveryKind,
    scan: Scan,
    policy: SupervisorPolicy,
    now: datetime,
) -> OwedMessage:
    """The alert of a record the catch-up found (U2): the order, its deadline, how late,
    which window it escaped, and the recovery requested. Its message id names the expired
    attempt."""
    deadline = expired.complete_by
    late = "" if deadline is None else f" {format_utc(deadline)}, {now - deadline} ago"
    if scan is Scan.BEYOND_WINDOW:
        escaped = (
            f"beyond the supervisor's window of {policy.window_seconds:g} s "
            f"(SUPERVISOR_WINDOW_SECONDS) and the catch-up's of "
            f"{policy.catch_up_window_seconds:g} s (SUPERVISOR_CATCHUP_WINDOW_SECONDS): found "
            "by the catch-up's query of the state records beyond its window"
        )
    else:
        escaped = (
            f"beyond the supervisor's window of {policy.window_seconds:g} s "
            "(SUPERVISOR_WINDOW_SECONDS): found by the catch-up"
        )
    reason = (
        f"{expired.process_state.value} past its CompleteBy{late}, {escaped}, which "
        f"requested {kind.value}"
    )
    return owed_alert(AlertKind.ORDER_OVERDUE, attempt=expired.attempt, at=now, reason=reason)


def _plan(
    expired: StateRecord, policy: SupervisorPolicy, timeouts: Timeouts, now: datetime
) -> tuple[StateRecord, RecoveryKind]:
    if expired.process_state is ProcessState.COMPENSATING:
        stalls = expired.compensation_failures + 1
        # A resume's undos draw on the order's retry budget: with nothing left for them, the
        # compensation goes to an operator instead (C4, C2).
        budget_left = expired.undo_tries_left > 0
        if stalls < policy.max_failures and budget_left:
            resumed = transitions.resume_compensation(
                expired, now=now, compensation_deadline=compensation_deadline(now, timeouts)
            )
            return resumed, RecoveryKind.COMPENSATION_RESUMED
        why = (
            f"(MAX_FAILURES={policy.max_failures})"
            if budget_left
            else "and the order's retry budget for its undos is spent (RETRY_BUDGET)"
        )
        stalled = transitions.stall_compensation(
            expired,
            now=now,
            reason=(
                f"compensation stalled {stalls} times, last by {expired.locked_by} at step "
                f"{expired.current_step or 'none'} {why}; {left_to_undo(expired)}"
            ),
        )
        return stalled, RecoveryKind.COMPENSATION_STALLED
    decision = supervisor_decision(
        expired.failure_count, now, policy, tries_left=expired.tries_left
    )
    if isinstance(decision, GiveUp):
        given_up = transitions.give_up(
            expired,
            now=now,
            reason=decision.reason,
            compensation_deadline=compensation_deadline(now, timeouts),
        )
        if given_up.process_state is ProcessState.COMPENSATING:
            return given_up, RecoveryKind.COMPENSATION_REQUESTED
        return given_up, RecoveryKind.GAVE_UP
    retried = transitions.retry_later(expired, now=now, not_before=decision.not_before)
    kind = RecoveryKind.RETRY_AFTER_LONG_WAIT if decision.long_wait else RecoveryKind.RETRY
    return retried, kind


def _recovery(
    kind: RecoveryKind,
    expired: StateRecord,
    planned: StateRecord,
    now: datetime,
) -> Recovery:
    """The recovery `planned` makes of `expired`, with what it owes (C6)."""
    expired_instance = expired.locked_by or ""
    reason = planned.last_error or ""
    attempt = planned.attempt
    if kind is RecoveryKind.GAVE_UP:
        # Nothing completed and no step is in doubt (give_up compensates one that is), so
        # Error leaves nothing behind.
        owed = (
            owed_status(OrderStatus.FAILED, attempt=attempt, at=now, reason=reason),
            owed_alert(AlertKind.ORDER_ERROR, attempt=attempt, at=now, reason=reason),
        )
        return Recovery(kind, expired_instance, planned, owed)
    if kind in (RecoveryKind.COMPENSATION_REQUESTED, RecoveryKind.COMPENSATION_RESUMED):
        start = owed_compensation(InstanceId(planned.order_id, attempt), at=now)
        return Recovery(kind, expired_instance, planned, (start,))
    if kind is RecoveryKind.COMPENSATION_STALLED:
        owed = (
            owed_status(OrderStatus.COMPENSATION_FAILED, attempt=attempt, at=now, reason=reason),
            owed_alert(AlertKind.COMPENSATION_FAILED, attempt=attempt, at=now, reason=reason),
        )
        return Recovery(kind, expired_instance, planned, owed)
    return Recovery(kind, expired_instance, planned)
