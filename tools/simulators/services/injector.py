"""Deciding each request's fault under a service's current fault plan (E2, E6-E9, C2).

How a plan decides (rules first, then the operation's mix, drawn reproducibly from the seed)
is described with the plans in `simulators.services.faults`. A permanent fault drawn from the
mix is the service's answer for good (E8): every later request for the same order and
operation gets it too, so a retry or a redelivered request never performs what was refused.
An action whose idempotency key was performed already is never declined (C8): the service
answers it from its ledger, as a real service replays a key's recorded result.

Each injected fault is counted by kind and by the operation it hit (`injected`), so a caller
can tell a failing compensation from a failing action, and per wall-clock second and kind
(`injected_times`), so a caller can place the faults on a time axis; at most
`MAX_TIMED_SECONDS` buckets are kept (the oldest are dropped first). Each latency fault's delay
is kept per operation (`latency_delays`, the latest `MAX_DELAYS` of each), so a caller can tell
which answers came after a deadline it knows and the service does not. Like the counts, they
live in memory and restart with the process.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tools.simulators.services.faults import FaultKind, FaultPlan, FaultRule

MAX_TIMED_SECONDS = 86_400
"""Per-second buckets of injected faults kept (per kind and second: a day of steady faults)."""
MAX_DELAYS = 10_000
"""Latency faults' delays kept per operation (the latest)."""


@dataclass(frozen=True)
class Fault:
    """The fault decided for one request; ``delay_seconds`` is the wait of a latency fault."""

    kind: FaultKind
    delay_seconds: float = 0.0


class FaultInjector:
    """Decides each request's fault under the current plan; safe to share between threads.

    ``kinds`` are the kinds the service knows, the ones `injected` lists; ``clock`` gives the
    wall-clock time (epoch seconds) `injected_times` records.
    """

    def __init__(
        self,
        plan: FaultPlan,
        seed: int,
        kinds: Iterable[FaultKind],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._seed = seed
        self._clock = clock
        self._kinds = tuple(kinds)
        self._lock = threading.Lock()
        self._plan = plan
        self._rule_matches = [0] * len(plan.rules)
        self._requests_per_order: Counter[tuple[str, str]] = Counter()
        self._refused_for_good: set[tuple[str, str]] = set()
        self._injected: Counter[tuple[str, FaultKind]] = Counter()
        self._delays: dict[str, deque[float]] = {}
        # (second, kind) -> [time of its first fault, faults in it]; insertion ordered.
        self._timed: dict[tuple[int, FaultKind], list[float]] = {}

    @property
    def plan(self) -> FaultPlan:
        return self._plan

    def replace_plan(self, plan: FaultPlan) -> None:
        """Use ``plan`` from the next request on; its rules count from zero."""
        with self._lock:
            self._plan = plan
            self._rule_matches = [0] * len(plan.rules)

    def decide(
        self, operation: str, order_id: str, attempt: int, *, declinable: bool = True
    ) -> Fault | None:
        """The fault of the next request for `operation` of `order_id`, if any. A request the
        service must not decline (`declinable` False: its idempotency key was performed
        already, and a decline would deny a side effect that exists, or this attempt's was
        declined already, and the ledger repeats that answer) gets no permanent fault; the
        draw is made all the same, so later requests draw as they would."""
        with self._lock:
            self._requests_per_order[operation, order_id] += 1
            position = self._requests_per_order[operation, order_id]
            draw = random.Random(f"{self._seed}/{operation}/{order_id}/{position}")
            fault = self._scripted(operation, order_id, attempt, draw)
            if fault is None and (operation, order_id) in self._refused_for_good:
                fault = Fault(FaultKind.PERMANENT)
            if fault is None:
                fault = self._drawn(operation, draw)
                if fault is not None and fault.kind is FaultKind.PERMANENT and declinable:
                    self._refused_for_good.add((operation, order_id))
            if fault is not None and fault.kind is FaultKind.PERMANENT and not declinable:
                return None
            if fault is not None:
                self._record(operation, fault)
            return fault

    def injected(self, operation: str | None = None) -> dict[str, int]:
        """Faults injected so far, by kind (every kind the service knows, zeros included),
        into every operation or into ``operation`` only."""
        with self._lock:
            counts: Counter[FaultKind] = Counter()
            for (hit, kind), count in self._injected.items():
                if operation in (None, hit):
                    counts[kind] += count
            return {kind.value: counts[kind] for kind in self._kinds}

    def requests_per_order(self) -> dict[str, int]:
        """Action and compensation calls that reached a decision, per order, faulted ones
        included: what an order's retry budget bounds (C4)."""
        with self._lock:
            counts: Counter[str] = Counter()
            for (_, order_id), count in self._requests_per_order.items():
                counts[order_id] += count
            return dict(counts)

    def latency_delays(self) -> dict[str, list[float]]:
        """Each latency fault's delay in seconds, per operation, oldest first (the latest
        `MAX_DELAYS` of each operation)."""
        with self._lock:
            return {operation: list(delays) for operation, delays in self._delays.items()}

    def injected_times(self) -> list[dict[str, Any]]:
        """The faults injected, per second and kind, oldest first: ``{"at": epoch seconds of
        the first fault of that kind in that second, "kind", "count"}``."""
        with self._lock:
            return [
                {"at": first, "kind": kind.value, "count": int(count)}
                for (_, kind), (first, count) in self._timed.items()
            ]

    def _record(self, operation: str, fault: Fault) -> None:
        kind = fault.kind
        self._injected[operation, kind] += 1
        if kind is FaultKind.LATENCY:
            delays = self._delays.setdefault(operation, deque(maxlen=MAX_DELAYS))
            delays.append(round(fault.delay_seconds, 3))
        now = self._clock()
        bucket = self._timed.get((int(now), kind))
        if bucket is not None:
            bucket[1] += 1
            return
        if len(self._timed) >= MAX_TIMED_SECONDS:
            del self._timed[next(iter(self._timed))]
        self._timed[int(now), kind] = [now, 1]

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
