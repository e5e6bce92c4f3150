"""What a chaos run injects, decided up front from its seed (a seed reproduces a run).

- The services' fault mix (`chaos_plans`): at every simulated service, transient faults
  (30 %: 503, nothing performed, E9), permanent ones (5 %: the step fails for good, E8, and
  the order compensates, C1), lost responses (the side effect happens, the answer is a 503:
  the case idempotency keys exist for, E7, C8), slow responses, some of them past the step
  deadline (E2, E6, E7) and hangs; compensations fail for good and stall midway (C2), and a
  shipment's cancel can find it dispatched.
- The crash schedule (`crash_schedule`): SIGKILL of the devhost (host and language workers),
  of the broker and of the services process, each restarted on the same stores, histories,
  journals and ports (C10), and a starter that dies between its claims and their starts
  (D3, U4), spread over the submission window, one per slot of equal width
  with a seeded jitter, so crashes land while orders are at every stage.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from simulators.services import SERVICES, FaultKind, FaultPlan

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


def chaos_plans() -> dict[str, FaultPlan]:
    """Every simulated service's fault plan for a chaos run."""
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
    plans = {}
    for name, service in SERVICES.items():
        undo = dict(compensations)
        if service.dispatchable:
            undo[FaultKind.DISPATCHED] = SHIPMENT_DISPATCHED
        plans[name] = FaultPlan(
            probabilities=actions,
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
