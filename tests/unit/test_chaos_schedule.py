"""What a chaos run injects is decided by its seed: the same workload, the same fault draws at
every service and the same crashes at the same times, every kind asked for, inside the
submission window; every service accepts its fault plan; and a few orders' compensations are
scripted to fail for good or stall whatever the mix draws (C2, U4)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from domain.workflow import DEFAULT_ORDER_STEPS
from tools.chaos.schedule import (
    CLEAN_REQUESTS,
    SCRIPTED_PER_CASE,
    TRANSIENT,
    CompensationScript,
    CrashKind,
    chaos_plans,
    compensation_script,
    crash_schedule,
)
from tools.demo.client import Workload
from tools.simulators.services import SERVICES, FaultKind, FaultPlan
from tools.simulators.services.injector import FaultInjector

COUNTS = {CrashKind.DEVHOST: 3, CrashKind.BROKER: 2, CrashKind.SERVICES: 2, CrashKind.CLAIM: 2}
SLOW_SECONDS = 12.0
REQUESTS = 4
"""Requests drawn per order and operation."""

Draws = dict[tuple[str, str, str], list[tuple[str | None, float]]]


def script(order_ids: Sequence[str], seed: int) -> CompensationScript:
    scripted = compensation_script(order_ids, seed, DEFAULT_ORDER_STEPS, slow_seconds=SLOW_SECONDS)
    assert scripted is not None
    return scripted


def fault_draws(
    plans: Mapping[str, FaultPlan], seed: int, order_ids: Sequence[str], *, interleaved: bool
) -> Draws:
    """What each service decides for the first requests of every order's action and
    compensation, as the services process does with ``seed``: order by order, or the orders'
    requests interleaved, the last order first."""
    draws: Draws = {}
    for name, plan in plans.items():
        service = SERVICES[name]
        injector = FaultInjector(plan, seed, service.fault_kinds)
        requests = [
            (operation, order_id)
            for order_id in order_ids
            for operation in (service.action, service.compensation)
        ]
        if interleaved:
            asked = [request for _ in range(REQUESTS) for request in reversed(requests)]
        else:
            asked = [request for request in requests for _ in range(REQUESTS)]
        for operation, order_id in asked:
            fault = injector.decide(operation, order_id, 1)
            draws.setdefault((name, operation, order_id), []).append(
                (None, 0.0) if fault is None else (fault.kind.value, fault.delay_seconds)
            )
    return draws


def items(workload: Workload) -> list[object]:
    """What each order of the workload asks for, whatever its id."""
    return [json.loads(m.body)["items"] for m in workload.messages if m.kind == "order"]


def test_a_seed_reproduces_the_crash_schedule_within_the_window() -> None:
    schedule = crash_schedule(4, 120.0, COUNTS)

    assert schedule == crash_schedule(4, 120.0, COUNTS)
    assert schedule != crash_schedule(5, 120.0, COUNTS)
    assert [crash.at_seconds for crash in schedule] == sorted(c.at_seconds for c in schedule)
    assert all(12.0 <= crash.at_seconds <= 120.0 for crash in schedule)
    assert {kind: sum(c.kind is kind for c in schedule) for kind in CrashKind} == COUNTS
    assert crash_schedule(4, 120.0, {}) == []


def test_a_seed_reproduces_the_workload_and_every_services_fault_draws() -> None:
    workload = Workload.generate(60, 4)
    other = Workload.generate(60, 5)

    assert workload == Workload.generate(60, 4)
    assert items(workload) != items(other)
    plans = chaos_plans(script(workload.order_ids, 4))
    assert plans == chaos_plans(script(Workload.generate(60, 4).order_ids, 4))
    draws = fault_draws(plans, 4, workload.order_ids, interleaved=False)
    # However the requests of different orders interleave, each order meets the same faults.
    assert draws == fault_draws(plans, 4, workload.order_ids, interleaved=True)
    assert draws != fault_draws(plans, 5, workload.order_ids, interleaved=False)
    drawn = {kind for answers in draws.values() for kind, _ in answers}
    assert {k.value for k in FaultKind} <= drawn


def test_every_service_accepts_its_chaos_plan_with_transient_and_permanent_faults() -> None:
    plans = chaos_plans(script(Workload.generate(50, 3).order_ids, 3))

    assert set(plans) == set(SERVICES)
    for name, plan in plans.items():
        SERVICES[name].check_plan(plan)
        assert plan.probabilities[FaultKind.TRANSIENT] == TRANSIENT
        assert plan.mix_for(SERVICES[name].compensation)[FaultKind.HANG] > 0
    assert FaultKind.DISPATCHED in plans["shipping"].kinds()


def test_scripted_compensations_fail_for_good_hang_or_answer_past_their_deadline() -> None:
    """C2: each scripted order fails its second step for good (E8) so it compensates, and
    the undo of that step, the first of its compensation (C1), fails for good
    (CompensationFailed), hangs once or answers once past the compensation deadline (a stall
    the supervisor resumes, U4); its first step draws no permanent fault, or it would end
    Error with nothing to undo."""
    order_ids = Workload.generate(200, 7).order_ids
    scripted = script(order_ids, 7)
    plans = chaos_plans(scripted)
    stock, payment = SERVICES["stock"], SERVICES["payment"]

    cases = (scripted.failing, scripted.hanging, scripted.slow)
    assert [len(case) for case in cases] == [SCRIPTED_PER_CASE] * 3
    everyone = [order_id for case in cases for order_id in case]
    assert len(set(everyone)) == len(everyone)
    assert scripted == script(order_ids, 7)
    stock_draws = FaultInjector(plans["stock"], 7, stock.fault_kinds)
    payment_draws = FaultInjector(plans["payment"], 7, payment.fault_kinds)
    for order_id in everyone:
        first = [stock_draws.decide(stock.action, order_id, 1) for _ in range(CLEAN_REQUESTS)]
        assert all(f is None or f.kind is not FaultKind.PERMANENT for f in first), order_id
        charges = [payment_draws.decide(payment.action, order_id, 1) for _ in range(3)]
        assert [f and f.kind for f in charges] == [FaultKind.PERMANENT] * 3, order_id

    def undos(order_id: str) -> list[tuple[FaultKind | None, float]]:
        decided = [payment_draws.decide(payment.compensation, order_id, 1) for _ in range(3)]
        return [(None, 0.0) if f is None else (f.kind, f.delay_seconds) for f in decided]

    for order_id in scripted.failing:
        assert undos(order_id) == [(FaultKind.PERMANENT, 0.0)] * 3
    for order_id in scripted.hanging:
        assert undos(order_id)[0] == (FaultKind.HANG, 0.0)
    for order_id in scripted.slow:
        assert undos(order_id)[0] == (FaultKind.LATENCY, SLOW_SECONDS)
    assert compensation_script(order_ids, 7, DEFAULT_ORDER_STEPS[:1], slow_seconds=1.0) is None
