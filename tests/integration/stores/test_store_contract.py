"""Store contract: every StateStore/OrderStore backend passes this suite (S2, D1, D3, D4, U2, C4).

Parametrised over the `store_factory` fixture (conftest.py): SQLite, and Cosmos against a local
Cosmos DB API server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from adapters.sqlite_store import SqliteStateStore
from domain import transitions
from domain.contracts import Order, OrderItem
from domain.dead_letters import WatchMark
from domain.policies import RetryBudget
from domain.ports import (
    InvalidContinuation,
    OperationKind,
    OrderStore,
    PreconditionFailed,
    RecordNotFound,
    StateStore,
    StoreMetrics,
)
from domain.records import (
    CompletedStep,
    InstanceId,
    ProcessState,
    StateRecord,
    StepState,
    StepStatus,
)
from domain.workflow import Step
from tests.integration.stores.store_backends import StoreFactory

NOW = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)
FUTURE = NOW + timedelta(minutes=5)
THREAD_TIMEOUT = 60.0
STEPS = ("reserve-stock", "charge-payment", "ship-order")
LAST = Step(2, STEPS[2], "ship-1")
"""The last step, completed: what `finish_steps` records."""


def pending(order_id: str, **changes: object) -> StateRecord:
    record = transitions.new_record(order_id, "replies-a", NOW - timedelta(minutes=1), STEPS)
    return replace(record, **changes)  # type: ignore[arg-type]


def processing(order_id: str, attempt: int = 1, **changes: object) -> StateRecord:
    fields: dict[str, object] = {
        "process_state": ProcessState.PROCESSING,
        "attempt": attempt,
        "locked_by": f"{order_id}:{attempt}",
        "complete_by": NOW - timedelta(seconds=10),
    }
    return pending(order_id, **{**fields, **changes})


def stored(states: StateStore, record: StateRecord) -> StateRecord:
    created = states.create(record)
    assert created.created
    return created.record


def an_order(order_id: str, currency: str = "EUR") -> Order:
    return Order(order_id, "customer-1", (OrderItem("sku-1", 2),), currency)


# --- idempotent create (S2, S4) -----------------------------------------------------------


def test_create_stores_a_new_record_with_an_etag(stores: tuple[StateStore, OrderStore]) -> None:
    states, _ = stores
    created = states.create(pending("o-1"))
    assert created.created
    assert created.record == pending("o-1")
    assert created.record.etag
    fetched = states.get("o-1")
    assert fetched == pending("o-1")
    assert fetched is not None
    assert fetched.etag == created.record.etag


def test_create_of_an_existing_record_returns_it_and_never_overwrites_s2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    first = stored(states, pending("o-1"))
    again = states.create(pending("o-1", reply_to="replies-b"))
    assert not again.created
    assert again.record == first
    assert again.record.etag == first.etag
    assert states.get("o-1") == first


def test_get_of_a_missing_record_is_none(stores: tuple[StateStore, OrderStore]) -> None:
    states, orders = stores
    assert states.get("nope") is None
    assert orders.get("nope") is None


# --- etag-conditional replace (D3, U4) -----------------------------------------------------


def test_replace_with_the_current_etag_writes_and_issues_a_new_etag(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    record = stored(states, pending("o-1"))
    claimed = transitions.claim(record, now=NOW, claim_deadline=FUTURE)
    written = states.replace(claimed)
    assert written == claimed
    assert written.etag not in (None, record.etag)
    assert states.get("o-1") == claimed


def test_replace_with_a_stale_etag_is_refused_and_changes_nothing_d3(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    record = stored(states, pending("o-1"))
    winner = states.replace(transitions.claim(record, now=NOW, claim_deadline=FUTURE))
    with pytest.raises(PreconditionFailed, match="o-1"):
        states.replace(transitions.claim(record, now=NOW, claim_deadline=FUTURE))
    after = states.get("o-1")
    assert after == winner
    assert after is not None
    assert after.etag == winner.etag


def test_replace_of_a_missing_record_or_without_etag_is_refused(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    with pytest.raises(RecordNotFound, match="o-9"):
        states.replace(replace(pending("o-9"), etag="made-up"))
    with pytest.raises(ValueError, match="needs the etag"):
        states.replace(pending("o-9"))


# --- fenced update: one conditional write, no read (D4, E5) -------------------------------


def test_fenced_update_applies_exactly_what_the_domain_change_says_d4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    running = (StepStatus(STEPS[0], StepState.RUNNING, NOW), *pending("o-1").steps[1:])
    before = stored(states, processing("o-1", attempt=2, steps=running))
    change = transitions.begin_step(
        InstanceId("o-1", 2),
        Step(1, STEPS[1]),
        complete_by=FUTURE,
        now=NOW,
        done=Step(0, STEPS[0], "o-1:reserve"),
    )
    after = states.fenced_update(change)
    assert after == change.apply(before)
    assert after is not None
    assert after.etag not in (None, before.etag)
    assert states.get("o-1") == after
    with pytest.raises(PreconditionFailed):
        states.replace(before)


def test_fenced_appends_keep_the_compensation_log_in_order_c1(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    stored(states, processing("o-1"))
    instance = InstanceId("o-1", 1)
    completed = [Step(i, name, f"o-1:{i}") for i, name in enumerate(STEPS)]
    for index, name in enumerate(STEPS):
        change = transitions.begin_step(
            instance,
            Step(index, name),
            complete_by=FUTURE,
            now=NOW,
            done=completed[index - 1] if index else None,
        )
        assert states.fenced_update(change) is not None
    done = states.fenced_update(transitions.finish_steps(instance, completed[2], now=NOW))
    assert done is not None
    assert done.process_state is ProcessState.PROCESSED
    assert done.compensation_log == tuple(
        CompletedStep(step.name, step.reference, NOW) for step in completed
    )


def test_step_writes_change_whole_step_entries_and_the_log_as_the_domain_says_c1(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The fenced writes of an attempt, one after another, on a record with a step list:
    the store keeps exactly what `FencedChange.apply` computes, entry by entry (C1, C2)."""
    states, _ = stores
    record = stored(states, transitions.claim(pending("o-1"), now=NOW, claim_deadline=FUTURE))
    attempt = InstanceId("o-1", 1)
    reserved = Step(0, STEPS[0], "res-1")
    changes = [
        transitions.begin_step(attempt, Step(0, STEPS[0]), complete_by=FUTURE, now=NOW),
        transitions.begin_step(
            attempt, Step(1, STEPS[1]), complete_by=FUTURE, now=NOW, done=reserved
        ),
        transitions.fail_step(
            attempt, Step(1, STEPS[1]), reason="declined", now=NOW, compensate_by=FUTURE
        ),
    ]
    for change in changes:
        expected = change.apply(record)
        after = states.fenced_update(change)
        assert after == expected
        assert after is not None
        record = after
    plan = transitions.compensation_plan(record)
    for change in (
        transitions.begin_undo(attempt, plan[0], complete_by=FUTURE, now=NOW),
        transitions.begin_undo(attempt, plan[1], complete_by=FUTURE, now=NOW, undone=plan[0]),
        transitions.finish_undo(attempt, undone=plan[1], now=NOW),
    ):
        expected = change.apply(record)
        after = states.fenced_update(change)
        assert after == expected
        assert after is not None
        record = after
    assert record.process_state is ProcessState.COMPENSATED
    assert record.compensation_log == (CompletedStep(STEPS[0], "res-1", NOW),)
    assert states.get("o-1") == record


@pytest.mark.parametrize(
    "existing",
    [
        processing("o-1", attempt=3),
        processing("o-1", attempt=2, process_state=ProcessState.ERROR),
        pending("o-1", attempt=2),
    ],
    ids=["newer-attempt-holds-it", "state-moved-on", "released-by-supervisor"],
)
def test_fenced_update_of_a_stale_attempt_is_refused_and_changes_nothing_d4_e5(
    stores: tuple[StateStore, OrderStore], existing: StateRecord
) -> None:
    states, _ = stores
    before = stored(states, existing)
    refused = states.fenced_update(transitions.finish_steps(InstanceId("o-1", 2), LAST, now=NOW))
    assert refused is None
    after = states.get("o-1")
    assert after == before
    assert after is not None
    assert after.etag == before.etag


def test_fenced_update_of_a_missing_record_is_refused(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    assert (
        states.fenced_update(transitions.finish_steps(InstanceId("o-1", 1), LAST, now=NOW)) is None
    )
    assert states.get("o-1") is None


# --- claimable query (D1, U5) --------------------------------------------------------------


def test_claimable_query_returns_due_unlocked_pending_records_only_d1(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    for record in [
        pending("due-new"),
        pending("due-retry", complete_by=NOW - timedelta(seconds=1), failure_count=1),
        pending("due-exactly-now", complete_by=NOW),
        pending("waiting-longer", complete_by=NOW + timedelta(seconds=1)),
        processing("running"),
        processing("processed", process_state=ProcessState.PROCESSED),
        processing("error", process_state=ProcessState.ERROR),
        processing("compensating", process_state=ProcessState.COMPENSATING),
    ]:
        stored(states, record)
    page = states.query_claimable(now=NOW, page_size=50)
    assert sorted(r.order_id for r in page.items) == ["due-exactly-now", "due-new", "due-retry"]
    assert page.continuation is None
    for record in page.items:
        assert record == states.get(record.order_id)
        states.replace(transitions.claim(record, now=NOW, claim_deadline=FUTURE))
    assert states.query_claimable(now=NOW, page_size=50).items == ()


def drain(fetch: Callable[[str | None], tuple[list[str], str | None]]) -> list[list[str]]:
    pages: list[list[str]] = []
    token: str | None = None
    while True:
        ids, token = fetch(token)
        pages.append(ids)
        if token is None:
            return pages
        assert len(pages) < 100, "paging must end"


def flat(pages: list[list[str]]) -> list[str]:
    return [item for page in pages for item in page]


def test_claimable_pages_cover_every_record_exactly_once_u2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    for index in range(23):
        stored(states, pending(f"o-{index:02}"))

    def fetch(token: str | None) -> tuple[list[str], str | None]:
        page = states.query_claimable(now=NOW, page_size=5, continuation=token)
        return [r.order_id for r in page.items], page.continuation

    pages = drain(fetch)
    assert [len(page) for page in pages] == [5, 5, 5, 5, 3]
    assert sorted(flat(pages)) == [f"o-{index:02}" for index in range(23)]


def test_claimable_paging_skips_nothing_when_records_are_claimed_between_pages_d1(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    for index in range(12):
        stored(states, pending(f"o-{index:02}"))
    seen: list[str] = []
    token: str | None = None
    while True:
        page = states.query_claimable(now=NOW, page_size=4, continuation=token)
        for record in page.items:
            states.replace(transitions.claim(record, now=NOW, claim_deadline=FUTURE))
            seen.append(record.order_id)
        token = page.continuation
        if token is None:
            break
    assert sorted(seen) == [f"o-{index:02}" for index in range(12)]


def test_page_size_is_capped_by_the_store_u2(stores: tuple[StateStore, OrderStore]) -> None:
    states, _ = stores
    cap = states.max_page_size
    for index in range(cap + 3):
        stored(states, pending(f"o-{index:05}"))
    page = states.query_claimable(now=NOW, page_size=cap + 50)
    assert len(page.items) == cap
    assert page.continuation is not None
    rest = states.query_claimable(now=NOW, page_size=cap, continuation=page.continuation)
    assert len(rest.items) == 3
    assert rest.continuation is None
    with pytest.raises(ValueError, match="page_size"):
        states.query_claimable(now=NOW, page_size=0)


def test_foreign_continuation_tokens_are_refused(stores: tuple[StateStore, OrderStore]) -> None:
    states, _ = stores
    for index in range(3):
        stored(states, pending(f"o-{index}"))
    token = states.query_claimable(now=NOW, page_size=1).continuation
    assert token is not None
    with pytest.raises(InvalidContinuation):
        states.query_expired(window_start=NOW, now=NOW, page_size=1, continuation=token)
    with pytest.raises(InvalidContinuation):
        states.query_claimable(now=NOW, page_size=1, continuation="not-a-token")


# --- expired query (U1, U2, C2) -----------------------------------------------------------


def test_expired_query_is_bounded_by_the_window_and_ordered_by_deadline_u1_u2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    window_start = NOW - timedelta(hours=1)
    for order_id, deadline, state in [
        ("before-window", window_start - timedelta(microseconds=1), ProcessState.PROCESSING),
        ("at-window-start", window_start, ProcessState.PROCESSING),
        ("expired-late", NOW - timedelta(seconds=1), ProcessState.PROCESSING),
        ("expired-early", NOW - timedelta(minutes=30), ProcessState.PROCESSING),
        ("expired-now", NOW, ProcessState.PROCESSING),
        ("still-running", NOW + timedelta(microseconds=1), ProcessState.PROCESSING),
        ("stalled-compensation", NOW - timedelta(minutes=10), ProcessState.COMPENSATING),
        ("finished", NOW - timedelta(minutes=5), ProcessState.PROCESSED),
    ]:
        stored(states, processing(order_id, complete_by=deadline, process_state=state))
    stored(states, pending("retry-waiting", complete_by=NOW - timedelta(minutes=1)))

    def fetch(token: str | None) -> tuple[list[str], str | None]:
        page = states.query_expired(
            window_start=window_start, now=NOW, page_size=2, continuation=token
        )
        return [r.order_id for r in page.items], page.continuation

    assert flat(drain(fetch)) == [
        "at-window-start",
        "expired-early",
        "stalled-compensation",
        "expired-late",
        "expired-now",
    ]


def test_records_with_the_same_deadline_page_without_loss_u2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    for index in range(7):
        stored(states, processing(f"o-{index}", complete_by=NOW - timedelta(seconds=5)))

    def fetch(token: str | None) -> tuple[list[str], str | None]:
        page = states.query_expired(
            window_start=NOW - timedelta(hours=1), now=NOW, page_size=3, continuation=token
        )
        return [r.order_id for r in page.items], page.continuation

    assert sorted(flat(drain(fetch))) == [f"o-{index}" for index in range(7)]


def test_the_query_beyond_every_window_finds_running_records_however_old_from_the_records_u2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """`query_expired_until` reads the state records themselves: every Processing or
    Compensating record whose CompleteBy is at most `until`, however old, paged with
    continuation tokens, each exactly once; oldest first where the store orders (SQLite)."""
    states, _ = stores
    until = NOW - timedelta(days=30)
    for order_id, deadline, state in [
        ("a-year-ago", NOW - timedelta(days=365), ProcessState.PROCESSING),
        ("at-the-edge", until, ProcessState.PROCESSING),
        ("inside-the-window", until + timedelta(microseconds=1), ProcessState.PROCESSING),
        ("stalled-compensation", NOW - timedelta(days=90), ProcessState.COMPENSATING),
        ("finished-long-ago", NOW - timedelta(days=200), ProcessState.PROCESSED),
        ("in-error-long-ago", NOW - timedelta(days=200), ProcessState.ERROR),
    ]:
        stored(states, processing(order_id, complete_by=deadline, process_state=state))
    stored(states, pending("retry-waiting", complete_by=NOW - timedelta(days=60)))
    stored(states, processing("ten-years-ago", complete_by=NOW - timedelta(days=3650)))

    def fetch(token: str | None) -> tuple[list[str], str | None]:
        page = states.query_expired_until(until=until, page_size=2, continuation=token)
        return [r.order_id for r in page.items], page.continuation

    pages = drain(fetch)
    assert all(len(page) <= 2 for page in pages)
    oldest_first = ["ten-years-ago", "a-year-ago", "stalled-compensation", "at-the-edge"]
    assert sorted(flat(pages)) == sorted(oldest_first)
    if isinstance(states, SqliteStateStore):
        assert flat(pages) == oldest_first
    assert states.query_expired_until(until=until - timedelta(days=3651), page_size=5).items == ()
    with pytest.raises(InvalidContinuation):
        states.query_expired_until(until=until, page_size=1, continuation="not-a-token")


# --- running count (C5) ---------------------------------------------------------------------


def test_running_count_covers_processing_and_compensating_records_up_to_the_cap_c5(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    assert states.count_running(at_most=10) == 0
    for index in range(3):
        stored(states, processing(f"running-{index}"))
    stored(states, processing("undoing", process_state=ProcessState.COMPENSATING))
    stored(states, pending("waiting"))
    for state in (ProcessState.PROCESSED, ProcessState.ERROR, ProcessState.COMPENSATED):
        stored(states, processing(f"done-{state.value}", process_state=state))

    assert states.count_running(at_most=10) == 4
    assert states.count_running(at_most=4) == 4
    assert states.count_running(at_most=2) == 2
    assert states.count_running(at_most=0) == 0


def test_backlog_count_covers_pending_processing_and_compensating_records_up_to_the_bound_c5(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    assert states.count_backlog(at_most=10) == 0
    stored(states, pending("waiting-0"))
    stored(states, pending("waiting-1"))
    stored(states, processing("running"))
    stored(states, processing("undoing", process_state=ProcessState.COMPENSATING))
    finished = (
        ProcessState.PROCESSED,
        ProcessState.ERROR,
        ProcessState.COMPENSATED,
        ProcessState.COMPENSATION_FAILED,
    )
    for state in finished:
        stored(states, processing(f"done-{state.value}", process_state=state))

    assert states.count_backlog(at_most=10) == 4
    assert states.count_backlog(at_most=4) == 4
    assert states.count_backlog(at_most=3) == 3
    assert states.count_backlog(at_most=0) == 0
    # The running count is the part of the backlog the starter has claimed; the Pending
    # count is the rest, the orders waiting to be started.
    assert states.count_running(at_most=10) == 2
    assert states.count_pending(at_most=10) == 2
    assert states.count_pending(at_most=1) == 1
    assert states.count_pending(at_most=0) == 0


def test_the_oldest_pending_record_is_found_claimable_or_not_and_none_once_claimed_c9(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The starter's backlog age (C9) reads when the longest-waiting Pending record became
    Pending, across every partition: one still waiting out its retry delay counts too."""
    states, _ = stores
    assert states.oldest_pending_since() is None
    stored(states, processing("running", updated_at=NOW - timedelta(hours=2)))
    stored(states, processing("done", process_state=ProcessState.PROCESSED))
    assert states.oldest_pending_since() is None, "nothing is Pending"

    stored(states, pending("fresh", updated_at=NOW - timedelta(seconds=5)))
    retrying = stored(
        states,
        pending(
            "retrying",
            attempt=1,
            updated_at=NOW - timedelta(seconds=40),
            complete_by=NOW + timedelta(seconds=30),
        ),
    )
    stored(states, pending("older", updated_at=NOW - timedelta(seconds=20)))
    assert states.oldest_pending_since() == NOW - timedelta(seconds=40)

    due = NOW + timedelta(seconds=30)
    states.replace(transitions.claim(retrying, now=due, claim_deadline=due + timedelta(minutes=1)))
    assert states.oldest_pending_since() == NOW - timedelta(seconds=20)


# --- metrics -------------------------------------------------------------------------------


def test_metrics_count_reads_writes_items_and_refusals(store_factory: StoreFactory) -> None:
    metrics = StoreMetrics()
    states, orders = store_factory.open_stores(metrics)
    orders.create(an_order("o-1"))
    record = stored(states, processing("o-1"))
    states.fenced_update(transitions.finish_steps(InstanceId("o-1", 7), LAST, now=NOW))
    states.get("o-1")
    orders.get("o-1")
    states.query_expired(window_start=NOW - timedelta(hours=1), now=NOW, page_size=10)
    states.replace(replace(record, failure_count=1))
    snapshot = metrics.snapshot()
    assert snapshot[OperationKind.CREATE].writes == 2
    assert snapshot[OperationKind.READ].reads == 2
    assert snapshot[OperationKind.FENCED_UPDATE].refused == 1
    assert snapshot[OperationKind.QUERY].items_read == 1
    assert snapshot[OperationKind.QUERY].reads == 1
    assert snapshot[OperationKind.REPLACE].writes == 1
    total = metrics.total()
    assert total.calls == 7
    assert total.request_charge >= 0.0


# --- orders database (S2) ------------------------------------------------------------------


def test_orders_create_is_idempotent_and_never_overwrites_s2(
    stores: tuple[StateStore, OrderStore],
) -> None:
    _, orders = stores
    assert orders.create(an_order("o-1")).created
    again = orders.create(an_order("o-1"))
    assert not again.created
    assert again.record == an_order("o-1")
    conflicting = orders.create(an_order("o-1", currency="USD"))
    assert not conflicting.created
    assert conflicting.record == an_order("o-1")
    assert orders.get("o-1") == an_order("o-1")


def test_the_two_stores_are_independent_s2(stores: tuple[StateStore, OrderStore]) -> None:
    states, orders = stores
    orders.create(an_order("o-1"))
    assert states.get("o-1") is None
    stored(states, pending("o-2"))
    assert orders.get("o-2") is None


def test_an_order_is_deleted_once_and_deleting_it_again_is_no_error_c3(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The retirement deletes an order's document (C3); a crash and a second run delete it
    again, and a later submission may write it again."""
    _, orders = stores
    orders.create(an_order("o-1"))
    orders.create(an_order("o-2"))
    assert orders.delete("o-1")
    assert orders.get("o-1") is None
    assert not orders.delete("o-1")
    assert not orders.delete("never-stored")
    assert orders.get("o-2") == an_order("o-2")
    assert orders.create(an_order("o-1")).created


# --- retirement (C3) ------------------------------------------------------------------------


def finished(order_id: str, state: ProcessState, updated_at: datetime) -> StateRecord:
    return pending(order_id, process_state=state, updated_at=updated_at, attempt=1)


def test_the_retirable_query_pages_through_finished_records_past_the_retention_only_c3(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """Processed, Error and Compensated records last changed before `until` and not retired
    yet; never a CompensationFailed one (an operator still owes it an undo), a running one,
    a recent one or a tombstone (C3)."""
    states, _ = stores
    until = NOW - timedelta(days=30)
    old, recent = until - timedelta(minutes=1), until + timedelta(minutes=1)
    due = {
        f"due-{state.value}-{index}"
        for state in (ProcessState.PROCESSED, ProcessState.ERROR, ProcessState.COMPENSATED)
        for index in range(2)
    }
    for order_id in sorted(due):
        stored(states, finished(order_id, ProcessState(order_id.split("-")[1]), old))
    for order_id, state, updated_at in (
        ("recent", ProcessState.PROCESSED, recent),
        ("owes-an-undo", ProcessState.COMPENSATION_FAILED, old),
        ("waiting", ProcessState.PENDING, old),
        ("running", ProcessState.PROCESSING, old),
        ("compensating", ProcessState.COMPENSATING, old),
    ):
        stored(states, finished(order_id, state, updated_at))
    tombstone = stored(states, finished("tombstone", ProcessState.PROCESSED, old))
    states.replace(transitions.retire(tombstone, now=NOW))
    seen: list[str] = []
    token: str | None = None
    for _ in range(10):
        page = states.query_retirable(until=until, page_size=4, continuation=token)
        assert len(page.items) <= 4
        assert all(record.etag for record in page.items)
        seen += [record.order_id for record in page.items]
        token = page.continuation
        if token is None:
            break
    assert sorted(seen) == sorted(due)


def test_a_retired_record_keeps_its_body_hash_and_leaves_the_retirable_query_c3(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    until = NOW - timedelta(days=30)
    body_hash = an_order("o-1").body_hash()
    record = stored(
        states,
        finished("o-1", ProcessState.COMPENSATED, until - timedelta(seconds=1)),
    )
    record = states.replace(replace(record, body_hash=body_hash))
    [served] = states.query_retirable(until=until, page_size=10).items
    assert served.etag == record.etag
    states.replace(transitions.retire(served, now=NOW))
    tombstone = states.get("o-1")
    assert tombstone is not None
    assert (tombstone.retired_at, tombstone.body_hash) == (NOW, body_hash)
    assert tombstone.process_state is ProcessState.COMPENSATED
    assert states.query_retirable(until=NOW, page_size=10).items == ()


# --- concurrency (D3, U6) ------------------------------------------------------------------


def test_of_many_hosts_claiming_the_same_read_exactly_one_wins_d3(
    store_factory: StoreFactory,
) -> None:
    states, _ = store_factory.open_stores()
    record = stored(states, pending("o-1"))
    hosts = [store_factory.open_stores()[0] for _ in range(8)]
    barrier = threading.Barrier(len(hosts), timeout=THREAD_TIMEOUT)

    def try_claim(host: StateStore) -> bool:
        barrier.wait()
        try:
            host.replace(transitions.claim(record, now=NOW, claim_deadline=FUTURE))
        except PreconditionFailed:
            return False
        return True

    with ThreadPoolExecutor(len(hosts)) as pool:
        outcomes = list(pool.map(try_claim, hosts, timeout=THREAD_TIMEOUT))
    assert outcomes.count(True) == 1
    final = states.get("o-1")
    assert final is not None
    assert final.locked_by == "o-1:1"


def test_one_store_object_serves_many_threads(stores: tuple[StateStore, OrderStore]) -> None:
    states, orders = stores

    def lifecycle(index: int) -> StateRecord | None:
        order_id = f"o-{index}"
        orders.create(an_order(order_id))
        record = stored(states, pending(order_id))
        claimed = states.replace(transitions.claim(record, now=NOW, claim_deadline=FUTURE))
        return states.fenced_update(
            transitions.finish_steps(InstanceId(order_id, claimed.attempt), LAST, now=NOW)
        )

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lifecycle, range(40), timeout=THREAD_TIMEOUT))
    assert all(r is not None and r.process_state is ProcessState.PROCESSED for r in results)


# --- the retry budget's blind draws (C4) ---------------------------------------------------


def test_concurrent_draws_add_up_and_never_give_more_than_the_budget_left_c4(
    store_factory: StoreFactory,
) -> None:
    """Eight hosts begin the same step at once, each drawing 3 tries in its fenced write:
    every draw lands (the count returned is 3, 6, ... 24), and what fit of them adds up to
    the steps' limit exactly; the undos' reserve stays whole, and nothing left goes below 0."""
    states, _ = store_factory.open_stores()
    budget = RetryBudget(total=20, undo_reserve=6)
    stored(states, processing("o-1", retry_budget=budget.total, undo_reserve=budget.undo_reserve))
    hosts = [store_factory.open_stores()[0] for _ in range(8)]
    barrier = threading.Barrier(len(hosts), timeout=THREAD_TIMEOUT)
    change = transitions.begin_step(
        InstanceId("o-1", 1), Step(0, STEPS[0]), complete_by=FUTURE, now=NOW, draw=3
    )

    def draw(host: StateStore) -> StateRecord | None:
        barrier.wait()
        return host.fenced_update(change)

    with ThreadPoolExecutor(len(hosts)) as pool:
        drawn = list(pool.map(draw, hosts, timeout=THREAD_TIMEOUT))
    counts = sorted(record.tries_spent for record in drawn if record is not None)
    assert counts == [3 * n for n in range(1, 9)]
    assert sum(budget.step_tries(3, spent) for spent in counts) == budget.forward_limit == 14
    final = states.get("o-1")
    assert final is not None
    assert (final.tries_spent, final.tries_left, final.undo_tries_left) == (24, 0, 6)


def test_undo_draws_spend_the_reserve_and_what_the_steps_left_and_stop_at_zero_c4(
    stores: tuple[StateStore, OrderStore],
) -> None:
    """The steps drew 10 of their limit of 14, so the undos may spend 10: the reserve of 6
    and the 4 the steps left. Four undo draws of 4 each fit 4, 4, 2 and 0."""
    states, _ = stores
    record = processing(
        "o-1",
        process_state=ProcessState.COMPENSATING,
        retry_budget=20,
        undo_reserve=6,
        tries_spent=10,
    )
    stored(states, record)
    fits = []
    for _ in range(4):
        change = transitions.begin_undo(
            InstanceId("o-1", 1), Step(0, STEPS[0], "r-1"), complete_by=FUTURE, now=NOW, draw=4
        )
        after = states.fenced_update(change)
        assert after is not None
        assert after == change.apply(replace(after, undo_tries_spent=after.undo_tries_spent - 4))
        fits.append(after.budget.undo_tries(4, after.tries_spent, after.undo_tries_spent))
    assert fits == [4, 4, 2, 0]
    final = states.get("o-1")
    assert final is not None
    assert (final.undo_tries_spent, final.undo_tries_left, final.tries_spent) == (16, 0, 10)


def test_a_refused_draw_spends_nothing_d4_c4(stores: tuple[StateStore, OrderStore]) -> None:
    states, _ = stores
    stored(states, processing("o-1", attempt=2))
    change = transitions.begin_step(
        InstanceId("o-1", 1), Step(0, STEPS[0]), complete_by=FUTURE, now=NOW, draw=5
    )
    assert states.fenced_update(change) is None
    final = states.get("o-1")
    assert final is not None
    assert final.tries_spent == 0


# --- the operator's list by state (E8, C2) ------------------------------------------------


def test_listing_by_state_pages_through_one_state_only_e8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    for index in range(5):
        stored(states, pending(f"p-{index}"))
    for index in range(3):
        stored(states, processing(f"w-{index}"))
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        page = states.query_by_state(state=ProcessState.PENDING, page_size=2, continuation=token)
        pages += 1
        assert len(page.items) <= 2
        seen += [record.order_id for record in page.items]
        assert all(record.etag for record in page.items)
        token = page.continuation
        if token is None:
            break
        assert pages < 10
    assert sorted(seen) == [f"p-{index}" for index in range(5)]
    running = states.query_by_state(state=ProcessState.PROCESSING, page_size=10)
    assert sorted(record.order_id for record in running.items) == ["w-0", "w-1", "w-2"]
    assert states.query_by_state(state=ProcessState.ERROR, page_size=10).items == ()


def test_a_listing_token_of_one_state_is_refused_for_another_e8(
    stores: tuple[StateStore, OrderStore],
) -> None:
    states, _ = stores
    for index in range(3):
        stored(states, pending(f"p-{index}"))
    page = states.query_by_state(state=ProcessState.PENDING, page_size=1)
    assert page.continuation is not None
    with pytest.raises(InvalidContinuation):
        states.query_by_state(state=ProcessState.ERROR, page_size=1, continuation=page.continuation)


def test_a_watch_mark_survives_a_reopen_and_is_no_state_record_s3(
    store_factory: StoreFactory,
) -> None:
    """The dead-letter watcher's marks (services.dead_letters): the empty mark until one is
    saved, the last save after the store is opened again, one per name, and never counted,
    claimed or swept as an order."""
    states, _ = store_factory.open_stores()
    assert states.load_watch_mark("dead-letters:orders") == WatchMark()
    states.save_watch_mark("dead-letters:orders", WatchMark(3, frozenset({5, 9}), resume=10))
    states.save_watch_mark("dead-letters:orders", WatchMark(4, frozenset({5, 9})))
    states.save_watch_mark("dead-letters:agent-responses", WatchMark(7))

    reopened, _ = store_factory.open_stores()
    assert reopened.load_watch_mark("dead-letters:orders") == WatchMark(4, frozenset({5, 9}))
    assert reopened.load_watch_mark("dead-letters:agent-responses") == WatchMark(7)
    assert reopened.count_backlog(at_most=10) == 0
    assert reopened.count_running(at_most=10) == 0
    assert reopened.query_claimable(now=NOW, page_size=10).items == ()
