"""Deciding each request's fault under a service's current fault plan (E2, E6-E9, C2).

How a plan decides (rules first, then the operation's mix, drawn reproducibly from the seed)
is described with the plans in `simulators.services.faults`. A permanent fault drawn from the
mix is the service's answer for good (E8): every later request for the same order and
operation gets it too, so a retry or a redelivered request never performs what was refused.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from simulators.services.faults import FaultKind, FaultPlan, FaultRule


@dataclass(frozen=True)
class Fault:
    """The fault decided for one request; ``delay_seconds`` is the wait of a latency fault."""

    kind: FaultKind
    delay_seconds: float = 0.0


class FaultInjector:
    """Decides each request's fault under the current plan; safe to share between threads.

    ``kinds`` are the kinds the service knows, the ones `injected` lists.
    """

    def __init__(self, plan: FaultPlan, seed: int, kinds: Iterable[FaultKind]) -> None:
        self._seed = seed
        self._kinds = tuple(kinds)
        self._lock = threading.Lock()
        self._plan = plan
        self._rule_matches = [0] * len(plan.rules)
        self._requests_per_order: Counter[tuple[str, str]] = Counter()
        self._refused_for_good: set[tuple[str, str]] = set()
        self._injected: Counter[FaultKind] = Counter()

    @property
    def plan(self) -> FaultPlan:
        return self._plan

    def replace_plan(self, plan: FaultPlan) -> None:
        """Use ``plan`` from the next request on; its rules count from zero."""
        with self._lock:
            self._plan = plan
            self._rule_matches = [0] * len(plan.rules)

    def decide(self, operation: str, order_id: str, attempt: int) -> Fault | None:
        with self._lock:
            self._requests_per_order[operation, order_id] += 1
            position = self._requests_per_order[operation, order_id]
            draw = random.Random(f"{self._seed}/{operation}/{order_id}/{position}")
            fault = self._scripted(operation, order_id, attempt, draw)
            if fault is None and (operation, order_id) in self._refused_for_good:
                fault = Fault(FaultKind.PERMANENT)
            if fault is None:
                fault = self._drawn(operation, draw)
                if fault is not None and fault.kind is FaultKind.PERMANENT:
                    self._refused_for_good.add((operation, order_id))
            if fault is not None:
                self._injected[fault.kind] += 1
            return fault

    def injected(self) -> dict[str, int]:
        """Faults injected so far, by kind (every kind the service knows, zeros included)."""
        with self._lock:
            return {kind.value: self._injected[kind] for kind in self._kinds}

    def _scripted(
        self, operation: str, order_id: str, attempt: int, draw: random.Random
    ) -> Fault | None:
        chosen: FaultRule | None = None
        for index, rule in enumerate(self._plan.rules):
            if not rule.matches(operation, order_id, attempt):
                continue
            self._rule_matches[index] += 1
            if chosen is None and rule.fires_on(self._rule_matches[index]):
                chosen = rule
        if chosen is None:
            return None
        if chosen.kind is FaultKind.LATENCY and chosen.delay_seconds is None:
            return Fault(chosen.kind, draw.uniform(*self._plan.latency_seconds))
        return Fault(chosen.kind, chosen.delay_seconds or 0.0)

    def _drawn(self, operation: str, draw: random.Random) -> Fault | None:
        mix = self._plan.mix_for(operation)
        roll = draw.random()
        threshold = 0.0
        # Walk the kinds in their fixed declaration order so a draw means the same thing
        # whatever order the plan's mapping was written in.
        for kind in FaultKind:
            threshold += mix.get(kind, 0.0)
            if roll < threshold:
                if kind is FaultKind.LATENCY:
                    return Fault(kind, draw.uniform(*self._plan.latency_seconds))
                return Fault(kind)
        return None
