"""The claims of Pending records (D1-D3, U5, C5): `claim_pending`, `claim_accepted`.

`claim_pending`, the starter's, pages through the claimable records (Pending, unlocked, past
any retry delay) and claims each by a conditional replace on the etag it was read with (D3),
no more than leave MAX_RUNNING_ORDERS running (C5). `claim_accepted`, the submission's,
claims the record it just created the same way (`claim_record`), when its running cap has
room. Only won claims are returned, for the caller to start once stored. Each starter run
also sets the backlog gauges from counts it makes anyway (C9).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from domain.policies import ScanBounds, Timeouts, claim_deadline
from domain.ports import PreconditionFailed, StateStore, StoreError
from domain.records import InstanceId, RecordFormatError, StateRecord
from domain.transitions import claim, is_claimable, release_claim
from observability import logs, metrics
from services.admission import BacklogGate, Full
from services.paging import BoundedScan, StopReason

log = logs.get_logger("app.starter")


@dataclass(frozen=True)
class Claim:
    """A won claim: start the orchestration `instance_id` for `record`."""

    instance_id: InstanceId
    record: StateRecord


@dataclass(frozen=True)
class StarterRun:
    claims: tuple[Claim, ...]
    pages: int
    items_read: int
    lost_races: int
    stopped: StopReason | None
    running: int
    """Orders running when the run began, counted up to the larger of the cap and the
    backlog bound (C5)."""
    pending: int
    """Orders Pending when the run began, counted up to the backlog bound (C5)."""
    refused: int = 0
    """Records the run could not claim for a reason of their own (logged); the others are
    claimed as if they were not there."""


def release(states: StateStore, claim: Claim, now: datetime) -> bool:
    """Give `claim` back to the starter after its orchestration could not be started (D3,
    C4); False when the record changed since the claim, which then belongs to whoever
    changed it."""
    try:
        states.replace(release_claim(claim.record, now=now))
    except PreconditionFailed:
        return False
    return True


def claim_record(
    states: StateStore, record: StateRecord, *, now: datetime, deadline: datetime
) -> Claim:
    """Claim `record` by a conditional replace on its etag, with the provisional CompleteBy
    `deadline` (D2, D3); raises `PreconditionFailed` when it changed since it was read."""
    stored = states.replace(claim(record, now=now, claim_deadline=deadline))
    return Claim(InstanceId(stored.order_id, stored.attempt), stored)


def claim_accepted(
    states: StateStore,
    record: StateRecord,
    now: datetime,
    *,
    timeouts: Timeouts,
    running: BacklogGate,
) -> Claim | None:
    """Claim the record a submission just stored, with the etag it was stored with (D3), when
    it is due and `running` has room under MAX_RUNNING_ORDERS (C5); None leaves it to the
    starter. A store error propagates; the record stays Pending or claimed, and either way the
    starter or the supervisor takes it from there."""
    if not is_claimable(record, now):
        return None
    place = running.reserve()
    if isinstance(place, Full):
        return None
    won = True  # a write that failed may have landed: keep its place until the next count
    try:
        return claim_record(states, record, now=now, deadline=claim_deadline(now, timeouts))
    except PreconditionFailed:
        won = False
        return None
    finally:
        running.settle(place, stored=won)


def claim_pending(
    states: StateStore,
    now: datetime,
    *,
    bounds: ScanBounds,
    timeouts: Timeouts,
    max_running: int,
    max_backlog: int,
) -> StarterRun:
    """Claim the due Pending records that one scan within `bounds` reads (D1-D3), no more
    than leave `max_running` orders running (C5); count the Pending and the unfinished
    orders up to `max_backlog` for the backlog gauges.

    Each claim gets the provisional CompleteBy of `timeouts` (D3).
    """
    running = states.count_running(at_most=max(max_running, max_backlog))
    pending = states.count_pending(at_most=max_backlog)
    metrics.backlog_observed(pending=pending, unfinished=min(pending + running, max_backlog))
    metrics.pending_observed(states.oldest_pending_since(), now=now)
    room = max_running - running
    if room <= 0:
        return StarterRun((), 0, 0, 0, None, running, pending)
    scan: BoundedScan[StateRecord] = BoundedScan(
        fetch=lambda size, token: states.query_claimable(
            now=now, page_size=size, continuation=token
        ),
        page_size=bounds.page_size,
        max_items=min(bounds.max_items, room),
        max_pages=bounds.max_pages,
    )
    claims: list[Claim] = []
    lost_races = refused = 0
    deadline = claim_deadline(now, timeouts)
    for record in scan:
        if not is_claimable(record, now):
            continue
        try:
            claims.append(claim_record(states, record, now=now, deadline=deadline))
        except PreconditionFailed:
            lost_races += 1
        except (RecordFormatError, StoreError) as error:
            # One record that cannot be claimed must not strand the claims won before it,
            # nor keep the starter from those after it.
            refused += 1
            log.warning(
                "record refused by the starter",
                order_id=record.order_id,
                error=type(error).__name__,
                detail=str(error)[:200],
            )
    return StarterRun(
        tuple(claims),
        scan.pages,
        scan.items_read,
        lost_races,
        scan.stopped,
        running,
        pending,
        refused,
    )
