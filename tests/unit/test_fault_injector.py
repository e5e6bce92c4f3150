"""A permanent fault drawn from a service's mix is its answer for good (E8): a retry or a
redelivered request for the same order and operation is refused again and never performs
what was refused; a scripted rule's permanent fault fires only as often as the rule says."""

from __future__ import annotations

import pytest

from tools.simulators.services import FaultKind, FaultPlan, FaultRule
from tools.simulators.services import injector as injector_module
from tools.simulators.services.injector import FaultInjector

KINDS = tuple(FaultKind)


def kinds(injector: FaultInjector, order_id: str, requests: int) -> list[FaultKind | None]:
    decided = [injector.decide("charge", order_id, 1) for _ in range(requests)]
    return [None if fault is None else fault.kind for fault in decided]


def test_a_drawn_permanent_fault_answers_every_later_request_for_the_order_and_operation() -> None:
    plan = FaultPlan(probabilities={FaultKind.PERMANENT: 0.3})
    injector = FaultInjector(plan, seed=3, kinds=KINDS)

    seen = {f"o-{n}": kinds(injector, f"o-{n}", 6) for n in range(40)}

    refused = [order for order, answers in seen.items() if FaultKind.PERMANENT in answers]
    assert refused, "the mix drew a permanent fault"
    for order in refused:
        answers = seen[order]
        first = answers.index(FaultKind.PERMANENT)
        assert answers[first:] == [FaultKind.PERMANENT] * (6 - first), order
    assert any(answers[0] is None and FaultKind.PERMANENT in answers for answers in seen.values())
    assert injector.injected()["permanent"] == sum(
        a.count(FaultKind.PERMANENT) for a in seen.values()
    )


def test_a_rules_permanent_fault_fires_only_as_often_as_the_rule_says() -> None:
    plan = FaultPlan(rules=(FaultRule(FaultKind.PERMANENT, order_id="o-1", times=1),))
    injector = FaultInjector(plan, seed=3, kinds=KINDS)

    assert kinds(injector, "o-1", 3) == [FaultKind.PERMANENT, None, None]


def test_each_injected_fault_is_timed_per_second_and_kind_from_the_wall_clock() -> None:
    now = [1_000.25]
    plan = FaultPlan(probabilities={FaultKind.TRANSIENT: 1.0})
    injector = FaultInjector(plan, seed=3, kinds=KINDS, clock=lambda: now[0])

    injector.decide("charge", "o-1", 1)
    now[0] = 1_000.75
    injector.decide("charge", "o-2", 1)
    now[0] = 1_003.5
    injector.decide("charge", "o-3", 1)

    assert injector.injected_times() == [
        {"at": 1_000.25, "kind": "transient", "count": 2},
        {"at": 1_003.5, "kind": "transient", "count": 1},
    ]
    assert injector.injected()["transient"] == 3


def test_the_fault_times_keep_a_bounded_number_of_seconds_and_the_counts_stay_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(injector_module, "MAX_TIMED_SECONDS", 3)
    now = [0.0]
    plan = FaultPlan(probabilities={FaultKind.TRANSIENT: 1.0})
    injector = FaultInjector(plan, seed=3, kinds=KINDS, clock=lambda: now[0])

    for second in range(5):
        now[0] = float(second)
        injector.decide("charge", f"o-{second}", 1)

    assert [entry["at"] for entry in injector.injected_times()] == [2.0, 3.0, 4.0]
    assert injector.injected()["transient"] == 5


def test_faults_are_counted_per_operation_and_each_latency_keeps_its_delay() -> None:
    """A failing compensation is told apart from a failing action (C2), and a slow answer's
    delay is kept so a client that knows its deadline can tell it came after it (E2, E6)."""
    plan = FaultPlan(
        rules=(
            FaultRule(FaultKind.TRANSIENT, operation="charge", times=2),
            FaultRule(FaultKind.LATENCY, operation="refund", times=1, delay_seconds=12.5),
            FaultRule(FaultKind.PERMANENT, operation="refund", skip=1, times=1),
        )
    )
    injector = FaultInjector(plan, seed=3, kinds=KINDS)

    for operation in ("charge", "charge", "charge", "refund", "refund", "refund"):
        injector.decide(operation, "o-1", 1)

    assert injector.injected("charge") == {
        kind.value: 2 if kind is FaultKind.TRANSIENT else 0 for kind in KINDS
    }
    refund = injector.injected("refund")
    assert (refund["latency"], refund["permanent"], sum(refund.values())) == (1, 1, 2)
    assert injector.injected()["transient"] == 2
    assert sum(injector.injected().values()) == 4
    assert injector.latency_delays() == {"refund": [12.5]}
