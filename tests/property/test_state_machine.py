"""A stateful model of the state record over both real stores (S4, D1-D4, E5-E8, U1-U6, C1,
C2, C4, C8, C10).

Hypothesis interleaves, at random, what every actor of the pattern does to a few orders:
submissions and their resends (`services.submission`), two starters (`services.starter`)
and two supervisors (`services.supervisor`: sweep and catch-up), each with its own store
objects and its own view of the records - a view read earlier and acted on later, so its
etags may be stale (D3, U6) - orchestration attempts writing their fenced step writes
(`services.steps`: begin a step, finish, fail, undo; each write possibly run twice,
C8; an attempt may also die silently, E6), and an operator acting on a view of their own
(`services.operator`: resubmit, retry compensation, cancel; E8, C2). A virtual clock moves
between the actions so that deadlines expire.

After every action an observer with its own store objects reads every record and checks:
- only transitions `domain.transitions` allows ever persist: each ProcessState change is an
  edge of its flow, the attempt counter never goes back, LockedBy changes only to a newer
  attempt's instance id or to nobody, and no step starts once compensation began (S4, D2,
  C1); a compensation ends Compensated, or Error for a give-up (its CompensationEndsIn), only
  with nothing left to undo (C1, U4);
- a write by an attempt that no longer holds the record (a stale fence) changes nothing and
  reports nothing applied (D4, E5);
- the compensation log always equals the completed steps in order: it only grows, each
  completed step is in it exactly once, in step order, with its reference, and it names no
  step that never completed (C1, C10).
Each example runs on a backend of its own (a fresh SQLite directory or a fresh Cosmos
database), so the starters' and supervisors' queries see only its orders.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from domain.policies import (
    ScanBounds,
    SupervisorPolicy,
    Timeouts,
    compensation_deadline,
    step_deadline,
)
from domain.ports import Page, PreconditionFailed, StateStore
from domain.records import FINISHED_STATES, InstanceId, ProcessState, StateRecord, StepState
from domain.transitions import IllegalTransition, compensation_plan
from domain.workflow import Step
from services import operator, steps
from services.admission import BacklogGate
from services.starter import claim_pending
from services.steps import Written
from services.submission import Accepted, submit_order
from services.supervisor import SweepReport, catch_up, sweep
from tests.integration.stores.store_backends import StoreFactory, cosmos_opener, sqlite_opener
from tests.support.cosmos_server import CosmosServer

T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
STEPS = ("reserve-stock", "charge-payment", "ship-order")
ORDER_IDS = ("o-a", "o-b")
REPLY_QUEUES = frozenset({"replies-a"})
TIMEOUTS = Timeouts(claim_seconds=60, step_seconds=30, compensation_seconds=30)
POLICY = SupervisorPolicy(
    max_failures=2,
    retry_delay_seconds=0,
    long_wait_after_failures=2,
    long_retry_delay_seconds=120,
    window_seconds=600,
    catch_up_window_seconds=3600,
    scan=ScanBounds(page_size=5, max_items=10, max_pages=3),
)
STARTER_SCAN = ScanBounds(page_size=5, max_items=10, max_pages=3)

COMPENSATING = ProcessState.COMPENSATING
COMPENSATION_STATES = frozenset(
    {ProcessState.COMPENSATING, ProcessState.COMPENSATED, ProcessState.COMPENSATION_FAILED}
)
ALLOWED = {
    ProcessState.PENDING: {ProcessState.PROCESSING, ProcessState.COMPENSATING},
    ProcessState.PROCESSING: {
        ProcessState.PROCESSED,
        ProcessState.ERROR,
        ProcessState.COMPENSATING,
        ProcessState.PENDING,
    },
    ProcessState.PROCESSED: set(),
    ProcessState.ERROR: {ProcessState.PENDING, ProcessState.COMPENSATING},
    ProcessState.COMPENSATING: {
        ProcessState.COMPENSATED,
        ProcessState.COMPENSATION_FAILED,
        ProcessState.ERROR,
    },
    ProcessState.COMPENSATED: set(),
    ProcessState.COMPENSATION_FAILED: {ProcessState.COMPENSATING},
}
"""The ProcessState flow of `domain.transitions` (docs/architecture.md, "The order's life"):
the edges a record may take in one write, besides staying in its state."""
FITTING = {
    ProcessState.ERROR: "resubmit",
    ProcessState.COMPENSATION_FAILED: "retry-compensation",
}
"""The operator action a state asks for (E8, C2); any other state: cancel."""
LOGGED_STEP_STATES = frozenset(
    {
        StepState.COMPLETED,
        StepState.COMPENSATING,
        StepState.COMPENSATED,
        StepState.COMPENSATION_FAILED,
    }
)
"""States of a step that completed: Completed, or on its way to being undone (C1)."""


class ViewedStore:
    """A starter's or supervisor's own store objects, with the view it read last: its next
    run is served that earlier page (old etags and all) instead of a fresh query, once."""

    def __init__(self, states: StateStore) -> None:
        self.states = states
        self.claimable: Page[StateRecord] | None = None
        self.expired: Page[StateRecord] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.states, name)

    def query_claimable(self, **kwargs: Any) -> Page[StateRecord]:
        page, self.claimable = self.claimable, None
        return page if page is not None else self.states.query_claimable(**kwargs)

    def query_expired(self, **kwargs: Any) -> Page[StateRecord]:
        page, self.expired = self.expired, None
        return page if page is not None else self.states.query_expired(**kwargs)


@dataclass
class Attempt:
    """One orchestration attempt as the model drives it: forward through the steps from
    where its claim resumes (C10), or compensating through its plan (C1)."""

    instance: InstanceId
    index: int = 0
    done: Step | None = None
    started: bool = False
    plan: tuple[Step, ...] | None = None
    undone: Step | None = None
    ends_in: ProcessState = ProcessState.COMPENSATED
    last_write: Callable[[], Written] | None = field(default=None, repr=False)

    @property
    def compensating(self) -> bool:
        return self.plan is not None


class StateRecordModel(RuleBasedStateMachine):
    """Random interleavings of every actor over one backend; see the module docstring."""

    open_backend: Callable[[], StoreFactory]

    def __init__(self) -> None:
        super().__init__()
        self.factory = self.open_backend()
        self.submitter, self.orders = self.factory.open_stores()
        self.observer, _ = self.factory.open_stores()
        self.starters = [ViewedStore(self.factory.open_stores()[0]) for _ in range(2)]
        self.supervisors = [ViewedStore(self.factory.open_stores()[0]) for _ in range(2)]
        self.operator_states, _ = self.factory.open_stores()
        self.attempt_states, _ = self.factory.open_stores()
        self.operator_views: dict[str, StateRecord] = {}
        self.gate = BacklogGate(
            lambda at_most: self.submitter.count_backlog(at_most=at_most),
            bound=100,
            recount_seconds=3600,
        )
        self.now = T0
        self.submitted: list[str] = []
        self.attempts: list[Attempt] = []
        self.seen: dict[str, StateRecord] = {}

    def teardown(self) -> None:
        self.factory.close()

    # --- submission (S1-S4) ------------------------------------------------------------------

    @initialize()
    def first_submission(self) -> None:
        self.submit(ORDER_IDS[0])

    @rule(which=st.sampled_from(ORDER_IDS))
    def submit(self, which: str) -> None:
        body = json.dumps(
            {
                "schemaVersion": 1,
                "orderId": which,
                "customerId": "c-1",
                "items": [{"sku": "sku-1", "quantity": 2}],
                "currency": "EUR",
            }
        )
        result = submit_order(
            body,
            reply_to="replies-a",
            message_id=which,
            orders=self.orders,
            states=self.submitter,
            admission=self.gate,
            reply_queues=REPLY_QUEUES,
            now=self.now,
            steps=STEPS,
        )
        assert isinstance(result, Accepted)
        assert result.state_created == (which not in self.submitted)
        if which not in self.submitted:
            self.submitted.append(which)

    # --- the clock --------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([1, 20, 45, 90, 900, 5000]))
    def advance_clock(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    # --- starters (D1-D3, C5) ---------------------------------------------------------------

    @rule(starter=st.sampled_from([0, 1]))
    def starter_reads(self, starter: int) -> None:
        """The starter reads the claimable records now and claims them later (D3)."""
        viewed = self.starters[starter]
        viewed.claimable = viewed.states.query_claimable(now=self.now, page_size=10)

    @rule(starter=st.sampled_from([0, 1]))
    def starter_runs(self, starter: int) -> None:
        run = claim_pending(
            self.starters[starter],  # type: ignore[arg-type]
            self.now,
            bounds=STARTER_SCAN,
            timeouts=TIMEOUTS,
            max_running=10,
            max_backlog=10,
        )
        for claim in run.claims:
            resume = claim.record.resume_at
            assert resume is not None, "a claimed order has a step left to run (C10)"
            self.attempts.append(Attempt(claim.instance_id, index=resume))

    # --- supervisors (U1-U6, C2) ------------------------------------------------------------

    @rule(supervisor=st.sampled_from([0, 1]))
    def supervisor_reads(self, supervisor: int) -> None:
        """The supervisor reads the expired records now and recovers them later (U6)."""
        viewed = self.supervisors[supervisor]
        viewed.expired = viewed.states.query_expired(
            window_start=self.now - timedelta(seconds=POLICY.window_seconds),
            now=self.now,
            page_size=10,
        )

    @rule(supervisor=st.sampled_from([0, 1]), catching_up=st.booleans())
    def supervisor_runs(self, supervisor: int, catching_up: bool) -> None:
        run = catch_up if catching_up else sweep
        report: SweepReport = run(
            self.supervisors[supervisor],  # type: ignore[arg-type]
            self.now,
            policy=POLICY,
            timeouts=TIMEOUTS,
        )
        for recovery in report.all_recoveries:
            if recovery.compensation_instance is not None:
                self.attempts.append(
                    Attempt(
                        recovery.compensation_instance,
                        plan=recovery.undo,
                        ends_in=recovery.record.compensation_ends_in,
                    )
                )

    # --- an operator (E8, C2, C4) -----------------------------------------------------------

    @precondition(lambda self: self.submitted)
    @rule(data=st.data())
    def operator_reads(self, data: st.DataObject) -> None:
        order_id = data.draw(st.sampled_from(self.submitted))
        record = self.operator_states.get(order_id)
        assert record is not None
        self.operator_views[order_id] = record

    @precondition(lambda self: self.submitted)
    @rule(
        data=st.data(),
        action=st.sampled_from(["fitting", "fitting", "resubmit", "retry-compensation", "cancel"]),
        on_view=st.booleans(),
    )
    def operator_acts(self, data: st.DataObject, action: str, on_view: bool) -> None:
        """The action on the version the operator looked at (`on_view`) or on the latest;
        refused when the order moved on (U4, U6) or is in a state the action does not take.
        A `fitting` action is the one the state the operator last saw asks for."""
        order_id = data.draw(st.sampled_from(self.submitted))
        view = self.operator_views.get(order_id) if on_view else None
        etag = None if view is None else view.etag
        states = self.operator_states
        if action == "fitting":
            seen = view or self.seen.get(order_id)
            action = FITTING.get(seen.process_state, "cancel") if seen else "cancel"
        try:
            if action == "resubmit":
                operator.resubmit_order(states, order_id, self.now, expected_etag=etag)
                return
            if action == "retry-compensation":
                request = operator.retry_compensation(
                    states, order_id, self.now, timeouts=TIMEOUTS, expected_etag=etag
                )
            else:
                request = operator.cancel_order(
                    states, order_id, self.now, timeouts=TIMEOUTS, reason="t", expected_etag=etag
                )
        except (IllegalTransition, PreconditionFailed):
            return
        self.attempts.append(
            Attempt(
                request.instance, plan=request.undo, ends_in=request.record.compensation_ends_in
            )
        )

    # --- orchestration attempts (D4, E5-E8, C1, C2, C8) -------------------------------------

    @precondition(lambda self: self.attempts)
    @rule(data=st.data(), writes=st.integers(1, 4))
    def attempt_progresses(self, data: st.DataObject, writes: int) -> None:
        """The attempt's next `writes` writes: start its step (or undo), or, the agent
        having succeeded, complete it and start the next (or finish)."""
        attempt = data.draw(st.sampled_from(self.attempts))
        for _ in range(writes):
            if attempt not in self.attempts:
                return
            if attempt.compensating:
                self._undo_progresses(attempt)
            else:
                self._step_progresses(attempt)

    @precondition(lambda self: any(a.started for a in self.attempts))
    @rule(data=st.data())
    def attempt_fails(self, data: st.DataObject) -> None:
        """The agent answered `failed` for the running step or undo (E8, C2)."""
        attempt = data.draw(st.sampled_from([a for a in self.attempts if a.started]))
        instance = attempt.instance
        if attempt.plan is not None:
            undo = attempt.plan[attempt.index]

            def write() -> Written:
                return steps.undo_failed(
                    self.attempt_states, instance, undo, reason="refused", now=self.now
                )

            self._fenced(attempt, write)
            self.attempts.remove(attempt)
            return
        index = attempt.index

        def fail() -> Written:
            return steps.fail_step(
                self.attempt_states,
                instance,
                Step(index, STEPS[index]),
                reason="declined",
                now=self.now,
                compensate_by=compensation_deadline(self.now, TIMEOUTS),
            )

        outcome = self._fenced(attempt, fail)
        record = outcome.record
        if outcome.applied and record is not None and record.process_state is COMPENSATING:
            # The same attempt undoes what completed, the failed step in doubt first (C1).
            attempt.plan, attempt.index, attempt.started, attempt.undone = (
                outcome.undo,
                0,
                False,
                None,
            )
        else:
            self.attempts.remove(attempt)

    @precondition(lambda self: any(a.last_write is not None for a in self.attempts))
    @rule(data=st.data())
    def attempt_repeats_its_last_write(self, data: st.DataObject) -> None:
        """The activity of the attempt's last write runs again (C8)."""
        attempt = data.draw(st.sampled_from([a for a in self.attempts if a.last_write]))
        assert attempt.last_write is not None
        self._fenced(attempt, attempt.last_write)

    @precondition(lambda self: self.attempts)
    @rule(data=st.data(), dies=st.integers(0, 3))
    def attempt_dies(self, data: st.DataObject, dies: int) -> None:
        """The orchestration ends without a write (its timer won, E6, or its host died):
        the expired CompleteBy is the supervisor's to find. (One draw in four: the other
        rules should have attempts to work with.)"""
        if dies == 0:
            self.attempts.remove(data.draw(st.sampled_from(self.attempts)))

    def _step_progresses(self, attempt: Attempt) -> None:
        instance, index, done = attempt.instance, attempt.index, attempt.done
        if not attempt.started:

            def begin() -> Written:
                return steps.begin_step(
                    self.attempt_states,
                    instance,
                    Step(index, STEPS[index]),
                    done=done,
                    now=self.now,
                    complete_by=step_deadline(self.now, TIMEOUTS),
                )

            if self._fenced(attempt, begin).applied:
                attempt.started = True
            else:
                self.attempts.remove(attempt)
            return
        completed = Step(index, STEPS[index], f"ref-{instance}-{index}")
        if index + 1 < len(STEPS):
            attempt.index, attempt.done, attempt.started = index + 1, completed, False
            self._step_progresses(attempt)
            return

        def finish() -> Written:
            return steps.finish_steps(self.attempt_states, instance, completed, now=self.now)

        self._fenced(attempt, finish)
        self.attempts.remove(attempt)

    def _undo_progresses(self, attempt: Attempt) -> None:
        assert attempt.plan is not None
        instance, plan, undone = attempt.instance, attempt.plan, attempt.undone
        if attempt.started:
            undone = plan[attempt.index]
            attempt.undone, attempt.index, attempt.started = undone, attempt.index + 1, False
        if attempt.index < len(plan):
            undo = plan[attempt.index]

            def begin() -> Written:
                return steps.begin_undo(
                    self.attempt_states,
                    instance,
                    undo,
                    undone=undone,
                    now=self.now,
                    complete_by=compensation_deadline(self.now, TIMEOUTS),
                )

            if self._fenced(attempt, begin).applied:
                attempt.started = True
            else:
                self.attempts.remove(attempt)
            return

        def finish() -> Written:
            return steps.finish_undo(
                self.attempt_states, instance, undone=undone, now=self.now, ends_in=attempt.ends_in
            )

        self._fenced(attempt, finish)
        self.attempts.remove(attempt)

    def _fenced(self, attempt: Attempt, write: Callable[[], Written]) -> Written:
        """Run one fenced write of `attempt`; a stale fence must change nothing (D4, E5)."""
        attempt.last_write = write
        order_id = attempt.instance.order_id
        before = self.observer.get(order_id)
        outcome = write()
        after = self.observer.get(order_id)
        assert before is not None
        assert after is not None
        if before.locked_by != str(attempt.instance):
            assert not outcome.applied, f"a stale fence {attempt.instance} was told it applied"
            assert after.etag == before.etag, f"a stale fence {attempt.instance} wrote {after}"
        return outcome

    # --- what must always hold --------------------------------------------------------------

    @invariant()
    def only_allowed_transitions_persist(self) -> None:
        for order_id in self.submitted:
            record = self.observer.get(order_id)
            previous = self.seen.get(order_id)
            if record is None:
                assert previous is not None
                assert previous.process_state in FINISHED_STATES, f"unfinished {order_id} vanished"
                continue
            check_record(record)
            if previous is not None and previous.etag != record.etag:
                check_transition(previous, record)
            self.seen[order_id] = record


def check_record(record: StateRecord) -> None:
    """What holds of every stored version of a record (C1, C10)."""
    logged = [entry.step for entry in record.compensation_log]
    assert len(set(logged)) == len(logged), f"a step is logged twice: {logged}"
    positions = [record.step_index(name) for name in logged]
    assert positions == sorted(positions), f"the log is not in step order: {logged}"
    for index, step in enumerate(record.steps):
        in_log = step.name in logged
        if step.state is StepState.COMPLETED:
            assert in_log, f"completed step {step.name} is not in the log {logged}"
        if in_log:
            assert step.state in LOGGED_STEP_STATES, f"logged step {step.name} is {step.state}"
            entry = record.compensation_log[logged.index(step.name)]
            assert step.reference == entry.reference, f"step {index} and its log entry differ"
    running = [step.name for step in record.steps if step.state is StepState.RUNNING]
    assert len(running) <= 1, f"more than one step running: {running}"
    if record.process_state in COMPENSATION_STATES:
        assert not running, f"a step runs while the order compensates: {running}"
    if record.locked_by is not None:
        assert record.locked_by == str(InstanceId(record.order_id, record.attempt))


def check_transition(before: StateRecord, after: StateRecord) -> None:
    """One persisted change is a transition the rulebook allows (S4, D2, D4, U4, C1, C2)."""
    edge = (before.process_state, after.process_state)
    assert (
        before.process_state == after.process_state
        or after.process_state in ALLOWED[before.process_state]
    ), f"forbidden transition {edge[0]} -> {edge[1]} of {after.order_id}"
    assert after.attempt >= before.attempt, "the attempt counter went back"
    if after.locked_by != before.locked_by and after.locked_by is not None:
        assert after.attempt > before.attempt, "LockedBy changed hands without a new attempt"
    if before.process_state is ProcessState.PROCESSING and edge[1] is ProcessState.PROCESSING:
        assert after.locked_by == before.locked_by, "a running attempt lost its lock in place"
    if edge[0] is ProcessState.COMPENSATING and edge[1] in (
        ProcessState.COMPENSATED,
        ProcessState.ERROR,
    ):
        assert edge[1] is before.compensation_ends_in, (
            f"meant for {before.compensation_ends_in}: {edge}"
        )
        left = compensation_plan(after)
        assert not left, f"{after.order_id} ended {edge[1]} with {left} left to undo (C1, U4)"
    old_log = before.compensation_log
    assert after.compensation_log[: len(old_log)] == old_log, "the compensation log was rewritten"
    if before.compensation_started_at is not None:
        started = [
            step.name
            for old, step in zip(before.steps, after.steps, strict=True)
            if step.state is StepState.RUNNING and old.state is not StepState.RUNNING
        ]
        assert not started, f"step {started} started after compensation began (C1)"


EXAMPLES = {"sqlite": 200, "cosmos": 40}
"""Runs per backend: each is one fresh backend and up to 50 actions; with hypothesis's
swarm of enabled rules, SQLite affords many (about 6 s), the Cosmos server fewer (about
30-40 s on two loaded cores)."""


def _model_settings(examples: int) -> settings:
    return settings(settings.default, max_examples=examples, stateful_step_count=50)


@pytest.mark.parametrize("backend_name", ["sqlite", "cosmos"])
def test_the_state_record_never_takes_a_forbidden_step(
    backend_name: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """S4, D1-D4, E5-E8, U1-U6, C1, C2, C4, C8, C10: random interleavings of submissions,
    claims, fenced step writes, recoveries, compensation and operator actions by several
    actors persist only allowed transitions; a stale fence never writes; the compensation
    log always equals the completed steps in order."""
    if backend_name == "cosmos":
        server: CosmosServer = request.getfixturevalue("cosmos_server")

        def open_backend() -> StoreFactory:
            return StoreFactory(cosmos_opener(server.connection_string))

    else:
        root: Path = tmp_path_factory.mktemp("model")
        count = iter(range(10**9))

        def open_backend() -> StoreFactory:
            directory = root / str(next(count))
            directory.mkdir()
            return StoreFactory(sqlite_opener(directory))

    machine = type("Model", (StateRecordModel,), {"open_backend": staticmethod(open_backend)})
    run_state_machine_as_test(machine, settings=_model_settings(EXAMPLES[backend_name]))
