"""Fault plans of the fulfilment simulator: what goes wrong, for which request, reproducibly.

The faults exercise the agent rules: transient faults and the circuit breaker (E9), hangs and
latency that outlast a deadline (E2, E6, E7), non-transient business failures (E8), and lost
responses, the case idempotency keys exist for (E7, C8).

Kinds (`FaultKind`) and what the client sees:
- ``transient``: 503 with ``Retry-After``; nothing is performed.
- ``latency``: a delay, then the request is handled normally.
- ``hang``: no answer until the client gives up (disconnects) or the service stops; nothing is
  performed.
- ``permanent``: 422 ``{"error": "permanent"}``; nothing is performed.
- ``lost-response``: the request is handled normally (the side effect happens), then the answer
  is replaced by the same 503 a transient fault gives.

A `FaultPlan` is consulted for every fulfil or cancel request, before anything is performed:
1. ``rules``, targeted and scripted. A rule filters on order id (an `fnmatch` pattern, so an
   exact id matches only itself), operation and attempt; it counts the requests that pass its
   filters and fires on the ones numbered ``skip + 1`` to ``skip + times`` (every one after
   ``skip`` when ``times`` is None). When several rules fire, the first listed wins.
2. otherwise ``probabilities``, a mix per kind (their sum at most 1).

Determinism: the probability draw for a request is a pure function of the seed, the operation,
the order id and how many requests for that order and operation came before it. The same seed
and the same requests per order give the same faults, however requests for different orders
interleave. Rule counters follow the order in which matching requests arrive.

Presets (`PRESETS`, by name):
- ``none``: no faults.
- ``default``: transient 5 %, latency 5 % (20-200 ms), lost-response 2 %, hang 1 %,
  permanent 0.5 %.
- ``harsh``: transient 20 %, latency 15 % (100 ms-1 s), lost-response 5 %, hang 5 %,
  permanent 2 %.

JSON form (``PUT /faults``, `FaultPlan.from_json`); every key is optional, ``preset`` names the
base plan (``none`` when absent) and the other keys replace its fields::

    {"preset": "default",
     "probabilities": {"transient": 0.1, "lost-response": 0.05},
     "latencySeconds": [0.02, 0.2],
     "retryAfterSeconds": 1,
     "rules": [{"kind": "transient", "orderId": "o-1", "operation": "fulfil",
                "attempt": 1, "skip": 0, "times": 2, "delaySeconds": null}]}
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any, TypeVar

T = TypeVar("T")


class FaultKind(StrEnum):
    TRANSIENT = "transient"
    LATENCY = "latency"
    HANG = "hang"
    PERMANENT = "permanent"
    LOST_RESPONSE = "lost-response"


class Operation(StrEnum):
    FULFIL = "fulfil"
    CANCEL = "cancel"


class InvalidFaultPlan(ValueError):
    """A fault plan that cannot be used; the message says which field is wrong and why."""


@dataclass(frozen=True)
class FaultRule:
    """A scripted fault: "the first N calls for order X", "every call for order X", ..."""

    kind: FaultKind
    order_id: str = "*"
    operation: Operation | None = None
    attempt: int | None = None
    skip: int = 0
    times: int | None = None
    delay_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.skip < 0:
            raise InvalidFaultPlan(f"rule skip must be >= 0, got {self.skip}")
        if self.times is not None and self.times < 1:
            raise InvalidFaultPlan(
                f"rule times must be >= 1 or null (every call), got {self.times}"
            )
        if self.delay_seconds is not None and self.delay_seconds < 0:
            raise InvalidFaultPlan(f"rule delaySeconds must be >= 0, got {self.delay_seconds}")

    def matches(self, operation: Operation, order_id: str, attempt: int) -> bool:
        return (
            (self.operation is None or self.operation is operation)
            and (self.attempt is None or self.attempt == attempt)
            and fnmatchcase(order_id, self.order_id)
        )

    def fires_on(self, match_number: int) -> bool:
        """Whether the rule fires on the ``match_number``-th request (1-based) it matched."""
        if match_number <= self.skip:
            return False
        return self.times is None or match_number <= self.skip + self.times

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> FaultRule:
        _refuse_unknown_keys(document, _RULE_KEYS, "rule")
        try:
            kind = FaultKind(document["kind"])
        except (KeyError, ValueError):
            raise InvalidFaultPlan(
                f"rule kind must be one of {[k.value for k in FaultKind]}, "
                f"got {document.get('kind')!r}"
            ) from None
        operation = document.get("operation")
        if operation is not None and operation not in {o.value for o in Operation}:
            raise InvalidFaultPlan(f"rule operation must be fulfil, cancel or null: {operation!r}")
        return cls(
            kind=kind,
            order_id=_typed(document, "orderId", str, "*"),
            operation=Operation(operation) if operation is not None else None,
            attempt=_optional_int(document, "attempt"),
            skip=_typed(document, "skip", int, 0),
            times=_optional_int(document, "times"),
            delay_seconds=_optional_number(document, "delaySeconds"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "orderId": self.order_id,
            "operation": self.operation.value if self.operation else None,
            "attempt": self.attempt,
            "skip": self.skip,
            "times": self.times,
            "delaySeconds": self.delay_seconds,
        }


@dataclass(frozen=True)
class FaultPlan:
    probabilities: Mapping[FaultKind, float] = field(default_factory=dict)
    rules: tuple[FaultRule, ...] = ()
    latency_seconds: tuple[float, float] = (0.02, 0.2)
    retry_after_seconds: int = 1

    def __post_init__(self) -> None:
        for kind, probability in self.probabilities.items():
            if not 0.0 <= probability <= 1.0:
                raise InvalidFaultPlan(
                    f"probability of {kind} must be in [0, 1], got {probability}"
                )
        total = sum(self.probabilities.values())
        if total > 1.0 + 1e-9:
            raise InvalidFaultPlan(f"fault probabilities add up to {total:.3f}; at most 1 allowed")
        low, high = self.latency_seconds
        if not 0.0 <= low <= high:
            raise InvalidFaultPlan(
                f"latencySeconds must be [low, high] with 0 <= low <= high, got [{low}, {high}]"
            )
        if self.retry_after_seconds < 0:
            raise InvalidFaultPlan(
                f"retryAfterSeconds must be >= 0, got {self.retry_after_seconds}"
            )

    @classmethod
    def preset(cls, name: str) -> FaultPlan:
        try:
            return PRESETS[name]
        except KeyError:
            raise InvalidFaultPlan(
                f"unknown fault preset {name!r}; choose one of {sorted(PRESETS)}"
            ) from None

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> FaultPlan:
        if not isinstance(document, Mapping):
            raise InvalidFaultPlan("a fault plan is a JSON object")
        _refuse_unknown_keys(document, _PLAN_KEYS, "fault plan")
        plan = cls.preset(_typed(document, "preset", str, "none"))
        changes: dict[str, Any] = {}
        if "probabilities" in document:
            changes["probabilities"] = _probabilities(document["probabilities"])
        if "rules" in document:
            rules = document["rules"]
            if not isinstance(rules, list) or not all(isinstance(r, Mapping) for r in rules):
                raise InvalidFaultPlan("rules must be a list of objects")
            changes["rules"] = tuple(FaultRule.from_json(rule) for rule in rules)
        if "latencySeconds" in document:
            changes["latency_seconds"] = _latency_range(document["latencySeconds"])
        if "retryAfterSeconds" in document:
            changes["retry_after_seconds"] = _typed(document, "retryAfterSeconds", int, 1)
        return replace(plan, **changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "probabilities": {kind.value: p for kind, p in self.probabilities.items()},
            "rules": [rule.to_json() for rule in self.rules],
            "latencySeconds": list(self.latency_seconds),
            "retryAfterSeconds": self.retry_after_seconds,
        }


PRESETS: Mapping[str, FaultPlan] = {
    "none": FaultPlan(),
    "default": FaultPlan(
        probabilities={
            FaultKind.TRANSIENT: 0.05,
            FaultKind.LATENCY: 0.05,
            FaultKind.LOST_RESPONSE: 0.02,
            FaultKind.HANG: 0.01,
            FaultKind.PERMANENT: 0.005,
        },
        latency_seconds=(0.02, 0.2),
    ),
    "harsh": FaultPlan(
        probabilities={
            FaultKind.TRANSIENT: 0.20,
            FaultKind.LATENCY: 0.15,
            FaultKind.LOST_RESPONSE: 0.05,
            FaultKind.HANG: 0.05,
            FaultKind.PERMANENT: 0.02,
        },
        latency_seconds=(0.1, 1.0),
    ),
}


@dataclass(frozen=True)
class Fault:
    """The fault decided for one request; ``delay_seconds`` is the wait of a latency fault."""

    kind: FaultKind
    delay_seconds: float = 0.0


class FaultInjector:
    """Decides each request's fault under the current plan; safe to share between threads."""

    def __init__(self, plan: FaultPlan, seed: int) -> None:
        self._seed = seed
        self._lock = threading.Lock()
        self._plan = plan
        self._rule_matches = [0] * len(plan.rules)
        self._requests_per_order: Counter[tuple[Operation, str]] = Counter()
        self._injected: Counter[FaultKind] = Counter()

    @property
    def plan(self) -> FaultPlan:
        return self._plan

    def replace_plan(self, plan: FaultPlan) -> None:
        """Use ``plan`` from the next request on; its rules count from zero."""
        with self._lock:
            self._plan = plan
            self._rule_matches = [0] * len(plan.rules)

    def decide(self, operation: Operation, order_id: str, attempt: int) -> Fault | None:
        with self._lock:
            self._requests_per_order[operation, order_id] += 1
            position = self._requests_per_order[operation, order_id]
            draw = random.Random(f"{self._seed}/{operation.value}/{order_id}/{position}")
            fault = self._scripted(operation, order_id, attempt, draw) or self._drawn(draw)
            if fault is not None:
                self._injected[fault.kind] += 1
            return fault

    def injected(self) -> dict[str, int]:
        """Faults injected so far, by kind (every kind listed, zeros included)."""
        with self._lock:
            return {kind.value: self._injected[kind] for kind in FaultKind}

    def _scripted(
        self, operation: Operation, order_id: str, attempt: int, draw: random.Random
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

    def _drawn(self, draw: random.Random) -> Fault | None:
        roll = draw.random()
        threshold = 0.0
        # Walk the kinds in their fixed declaration order so a draw means the same thing
        # whatever order the plan's mapping was written in.
        for kind in FaultKind:
            threshold += self._plan.probabilities.get(kind, 0.0)
            if roll < threshold:
                if kind is FaultKind.LATENCY:
                    return Fault(kind, draw.uniform(*self._plan.latency_seconds))
                return Fault(kind)
        return None


_PLAN_KEYS = frozenset({"preset", "probabilities", "rules", "latencySeconds", "retryAfterSeconds"})
_RULE_KEYS = frozenset({"kind", "orderId", "operation", "attempt", "skip", "times", "delaySeconds"})


def _refuse_unknown_keys(document: Mapping[str, Any], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(document) - known)
    if unknown:
        raise InvalidFaultPlan(f"unknown {what} keys {unknown}; known keys are {sorted(known)}")


def _typed(document: Mapping[str, Any], key: str, kind: type[T], default: T) -> T:
    value = document.get(key, default)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InvalidFaultPlan(f"{key} must be {kind.__name__}, got {value!r}")
    return value


def _optional_int(document: Mapping[str, Any], key: str) -> int | None:
    value = document.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise InvalidFaultPlan(f"{key} must be an integer or null, got {value!r}")
    return value


def _optional_number(document: Mapping[str, Any], key: str) -> float | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidFaultPlan(f"{key} must be a number or null, got {value!r}")
    return float(value)


def _probabilities(value: Any) -> dict[FaultKind, float]:
    if not isinstance(value, Mapping):
        raise InvalidFaultPlan("probabilities must be an object of kind -> probability")
    result: dict[FaultKind, float] = {}
    for name, probability in value.items():
        try:
            kind = FaultKind(name)
        except ValueError:
            raise InvalidFaultPlan(
                f"unknown fault kind {name!r}; choose from {[k.value for k in FaultKind]}"
            ) from None
        if not isinstance(probability, int | float) or isinstance(probability, bool):
            raise InvalidFaultPlan(f"probability of {name} must be a number, got {probability!r}")
        result[kind] = float(probability)
    return result


def _latency_range(value: Any) -> tuple[float, float]:
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        raise InvalidFaultPlan(f"latencySeconds must be [low, high] in seconds, got {value!r}")
    return float(value[0]), float(value[1])
