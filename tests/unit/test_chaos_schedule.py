"""What a chaos run injects is decided by its seed: the same crashes at the same times, every
kind asked for, inside the submission window; and every service accepts its fault plan."""

from __future__ import annotations

from chaos.schedule import TRANSIENT, CrashKind, chaos_plans, crash_schedule
from simulators.services import SERVICES, FaultKind

COUNTS = {CrashKind.DEVHOST: 3, CrashKind.BROKER: 2, CrashKind.SERVICES: 2, CrashKind.CLAIM: 2}


def test_a_seed_reproduces_the_crash_schedule_within_the_window() -> None:
    schedule = crash_schedule(4, 120.0, COUNTS)

    assert schedule == crash_schedule(4, 120.0, COUNTS)
    assert schedule != crash_schedule(5, 120.0, COUNTS)
    assert [crash.at_seconds for crash in schedule] == sorted(c.at_seconds for c in schedule)
    assert all(12.0 <= crash.at_seconds <= 120.0 for crash in schedule)
    assert {kind: sum(c.kind is kind for c in schedule) for kind in CrashKind} == COUNTS
    assert crash_schedule(4, 120.0, {}) == []


def test_every_service_accepts_its_chaos_plan_with_transient_and_permanent_faults() -> None:
    plans = chaos_plans()

    assert set(plans) == set(SERVICES)
    for name, plan in plans.items():
        SERVICES[name].check_plan(plan)
        assert plan.probabilities[FaultKind.TRANSIENT] == TRANSIENT
        assert plan.mix_for(SERVICES[name].compensation)[FaultKind.HANG] > 0
    assert FaultKind.DISPATCHED in plans["shipping"].kinds()
