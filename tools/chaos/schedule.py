"""What a chaos run injects, decided up front from its seed (a seed reproduces a run).

- The services' fault mix (`chaos_plans`): at every simulated service, transient faults
  (30 %: 503, nothing performed, E9), permanent ones (5 %: the step fails for good, E8, and
  the order compensates, C1), lost responses (the side effect happens, the answer is a 503:
  the case idempotency keys exist for, E7, C8), slow responses, some of them past the step
  deadline (E2, E6, E7) and hangs; compensations fail for good and stall midway (C2), and a
  shipment's cancel can find it dispatched.
- The scripted compensations (`compensation_script`): a few of the workload's orders whose
  compensation fails for good, hangs or answers past its deadline, whatever the mix draws,
  so that every run, however small, ends orders `CompensationFailed` and has stalled
  compensations for the supervisor to resume (C2, U4).
- The crash schedule (`crash_schedule`): SIGKILL of the devhost (host and language workers),
  of the broker and of the services process, each restarted on the same stores, histories,
  journals and ports (C10), and a starter that dies between its claims and their starts
  (D3, U4), spread over the submission window, one per slot of equal width
  with a seeded jitter, so crashes land while orders are at every stage.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from domain.workflow import StepDeclaration, declaration
from tools.simulators.services import SERVICES, FaultKind, FaultPlan, FaultRule
from tools.simulators.services.injector import FaultInjector

TRANSIENT = 0.30
PERMANENT = 0.05
# Slow answers: uniform over LATENCY_SECONDS, the top of it past STEP_TIMEOUT_SECONDS.
LATENCY = 0.02
LATENCY_SECONDS = (1.0, 14.0)
LOST_RESPONSE = 0.03
HANG = 0.005
# Compensations: fail for good and stall (C2) more often than actions do.
COMPENSATION_PERMANENT = 0.03
COMPENSATION_HANG = 0.03
SHIPMENT_DISPATCHED = 0.1
# Scripted compensations: orders per case, and how many of a scripted order's first requests
# for its first step must draw no permanent fault (a retried or resumed step asks again).
SCRIPTED_PER_CASE = 2
CLEAN_REQUESTS = 10


class CrashKind(StrEnum):
    DEVHOST = "devhost-kill"
    BROKER = "broker-kill"
    SERVICES = "services-kill"
    CLAIM = "crash-between-claim-and-start"


@dataclass(frozen=True)
class Crash:
    at_seconds: float
    """Seconds after the first submission."""
    kind: CrashKind


@dataclass(frozen=True)
class CompensationScript:
    """Orders whose compensation is scripted (C2). Each fails its second step for good (a
    permanent fault on every request of that step's action, E8), so it compensates, and its
    compensation undoes that failed step first, by its idempotency key (its outcome is in
    doubt, C1). That first undo
    - ``failing``: fails for good on every request: the order ends ``CompensationFailed``, with
      an operator alert (C2, E8);
    - ``hanging``: hangs on its first request until the agent gives up at the compensation's
      deadline: the supervisor finds the stalled compensation and resumes it (C2, U4);
    - ``slow``: answers its first request only after ``slow_seconds``, past the compensation's
      deadline: stalled and resumed the same way, an answer that comes too late (E2, E6).
    What comes after a resumed compensation is the mix's.
    """

    first: StepDeclaration
    second: StepDeclaration
    failing: tuple[str, ...]
    hanging: tuple[str, ...]
    slow: tuple[str, ...]
    slow_seconds: float

    def rules(self) -> dict[str, tuple[FaultRule, ...]]:
        """The fault rules of the script, by service name: all at the second step's."""
        action, undo = self.second.action, self.second.compensation
        return {
            self.second.agent: (
                *(
                    FaultRule(FaultKind.PERMANENT, order_id=order_id, operation=action)
                    for order_id in (*self.failing, *self.hanging, *self.slow)
                ),
                *(FaultRule(FaultKind.PERMANENT, order_id=o, operation=undo) for o in self.failing),
                *(
                    FaultRule(FaultKind.HANG, order_id=o, operation=undo, times=1)
                    for o in self.hanging
                ),
                *(
                    FaultRule(
                        FaultKind.LATENCY,
                        order_id=o,
                        operation=undo,
                        times=1,
                        delay_seconds=self.slow_seconds,
                    )
                    for o in self.slow
                ),
            )
        }

    def to_json(self) -> dict[str, list[str]]:
        return {
            "failing": list(self.failing),
            "hanging": list(self.hanging),
            "slow": list(self.slow),
        }


def compensation_script(
    order_ids: Sequence[str], seed: int, steps: Sequence[str], *, slow_seconds: float
) -> CompensationScript | None:
    """The scripted compensations of a run of ``order_ids`` with ``seed`` and ``steps`` (None
    for a workflow of one step, which never compensates). The orders are the first of the
    workload whose first step's action draws no permanent fault from the seed's mix in its
    first `CLEAN_REQUESTS` requests: an order that fails its first step ends ``Error`` with
    nothing to compensate (E8)."""
    if len(steps) < 2:
        return None
    first, second = declaration(steps[0]), declaration(steps[1])
    service = SERVICES[first.agent]
    chosen: list[str] = []
    for order_id in order_ids:
        if len(chosen) == 3 * SCRIPTED_PER_CASE:
            break
        # The services' own draw: a pure function of the seed, operation, order and position.
        draws = FaultInjector(chaos_plans()[first.agent], seed, service.fault_kinds)
        faults = [draws.decide(first.action, order_id, 1) for _ in range(CLEAN_REQUESTS)]
        if all(fault is None or fault.kind is not FaultKind.PERMANENT for fault in faults):
            chosen.append(order_id)
    return CompensationScript(
        first=first,
        second=second,
        failing=tuple(chosen[0::3]),
        hanging=tuple(chosen[1::3]),
        slow=tuple(chosen[2::3]),
        slow_seconds=slow_seconds,
    )


def chaos_plans(script: CompensationScript | None = None) -> dict[str, FaultPlan]:
    """Every simulated service's fault plan for a chaos run, with ``script``'s rules."""
    actions: dict[FaultKind, float] = {
        FaultKind.TRANSIENT: TRANSIENT,
        FaultKind.PERMANENT: PERMANENT,
        FaultKind.LATENCY: LATENCY,
        FaultKind.LOST_RESPONSE: LOST_RESPONSE,
        FaultKind.HANG: HANG,
    }
    compensations: dict[FaultKind, float] = {
        **actions,
        FaultKind.PERMANENT: COMPENSATION_PERMANENT,
        FaultKind.HANG: COMPENSATION_HANG,
    }
    scripted = script.rules() if script is not None else {}
    plans = {}
    for name, service in SERVICES.items():
        undo = dict(compensations)
        if service.dispatchable:
            undo[FaultKind.DISPATCHED] = SHIPMENT_DISPATCHED
        plans[name] = FaultPlan(
            probabilities=actions,
            rules=scripted.get(name, ()),
            operation_probabilities={service.compensation: undo},
            latency_seconds=LATENCY_SECONDS,
        )
    return plans


def crash_schedule(
    seed: int, window_seconds: float, counts: Mapping[CrashKind, int]
) -> list[Crash]:
    """The crashes of a run, in time order, within ``window_seconds`` after the first
    submission (the first slot starts after a tenth of it, so some orders are in flight)."""
    rng = random.Random(f"chaos-crashes-{seed}")
    kinds = [kind for kind, count in counts.items() for _ in range(count)]
    rng.shuffle(kinds)
    if not kinds:
        return []
    start = window_seconds * 0.1
    slot = (window_seconds - start) / len(kinds)
    return [
        Crash(round(start + slot * (index + rng.uniform(0.2, 0.8)), 2), kind)
        for index, kind in enumerate(kinds)
    ]
