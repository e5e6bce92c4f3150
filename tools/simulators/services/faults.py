"""Fault plans of the simulated services: what goes wrong, for which request, reproducibly.

The faults exercise the agent rules: transient faults and the circuit breaker (E9), hangs and
latency that outlast a deadline (E2, E6, E7), non-transient business failures (E8), lost
responses, the case idempotency keys exist for (E7, C8), and compensations that fail or stall
midway (C1, C2).

Kinds (`FaultKind`) and what the client sees; each applies to actions and compensations alike
(a compensation by idempotency key is its service's compensation operation):
- ``transient``: 503 with ``Retry-After``; nothing is performed.
- ``latency``: a delay, then the request is handled normally.
- ``hang``: no answer until the client gives up (disconnects) or the service stops; nothing is
  performed. On a compensation this is the stall of C2.
- ``permanent``: 422 ``{"error": "permanent"}``; nothing is performed, and retrying the same
  request will not help (a declined payment, a compensation that fails for good): once drawn
  from a mix, every later request for that order and operation gets it too (a rule's
  permanent fault fires as the rule says, so a script can let a later request through). Never
  on an action whose idempotency key was performed already (its answer lost, say): that
  request is answered from the ledger, since a service never declines what it did (C8).
- ``lost-response``: the request is handled normally (the side effect happens), then the answer
  is replaced by the same 503 a transient fault gives.
- ``dispatched``, services with a dispatch rule only (shipping): on the action, the shipment is
  performed and dispatched at once; on the compensation, the shipment turns out dispatched
  before the cancel arrives. A dispatched shipment cannot be cancelled: every cancel of it
  answers 422 ``{"error": "already-dispatched"}``, a compensation failure for good.

A `FaultPlan` is consulted for every action or compensation request, before anything is
performed. Operations are named by the service: ``reserve``/``release`` (stock),
``charge``/``refund`` (payment), ``ship``/``cancel`` (shipping).
1. ``rules``, targeted and scripted. A rule filters on order id (an `fnmatch` pattern, so an
   exact id matches only itself), operation and attempt; it counts the requests that pass its
   filters and fires on the ones numbered ``skip + 1`` to ``skip + times`` (every one after
   ``skip`` when ``times`` is None: the order's requests then fail for good). When several
   rules fire, the first listed wins.
2. otherwise the operation's mix: ``operationProbabilities[operation]`` when the plan has one
   for it, else ``probabilities``; a mix maps kinds to probabilities that add up to at most 1.
Plus, for services with a dispatch rule, ``dispatchAfterSeconds``: a shipment older than that
when a cancel arrives has been dispatched (null: shipments are dispatched by faults only).

Determinism: the probability draw for a request is a pure function of the seed, the operation,
the order id and how many requests for that order and operation came before it. The same seed
and the same requests per order give the same faults, however requests for different orders
interleave. Rule counters follow the order in which matching requests arrive.

Presets (`FaultPlan.preset(name, service)`; every service's plan of a preset:
`simulators.services.declarations.preset_plans`; the names: `PRESET_NAMES`). Mixes in percent;
"noise" is transient 5, latency 5 (20-200 ms), lost-response 2.
- ``none``: no faults, every service.
- ``default``: every service transient 5, latency 5 (20-200 ms), lost-response 2, hang 1,
  permanent 0.5.
- ``harsh``: every service transient 20, latency 15 (100 ms-1 s), lost-response 5, hang 5,
  permanent 2.
- ``declines``, orders that must compensate, with healthy compensations: noise on every
  operation, and charge adds permanent 15 (payments declined for good, so the stock
  reservation is released), ship adds permanent 5 (the payment is refunded and the stock
  released), cancel of a shipment adds dispatched 50 (half the shipments to cancel are gone).
- ``compensation-faults``: ``declines``, and compensations that fail and stall: release, refund
  and cancel each transient 15, latency 10, lost-response 5, hang 5 (stalls), permanent 5
  (fails for good); cancel also dispatched 30.

JSON form (``PUT /faults``, `FaultPlan.from_json`, for a named service); every key is optional,
``preset`` names the base plan (``none`` when absent; the preset's plan for that service) and
the other keys replace its fields. ``operationProbabilities`` and ``dispatchAfterSeconds`` are left
out of a plan's JSON when they are empty or null::

    {"preset": "default",
     "probabilities": {"transient": 0.1, "lost-response": 0.05},
     "operationProbabilities": {"refund": {"hang": 0.2}},
     "latencySeconds": [0.02, 0.2],
     "retryAfterSeconds": 1,
     "dispatchAfterSeconds": 30,
     "rules": [{"kind": "transient", "orderId": "o-1", "operation": "reserve",
                "attempt": 1, "skip": 0, "times": 2, "delaySeconds": null}]}
"""

from __future__ import annotations

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
    DISPATCHED = "dispatched"


class InvalidFaultPlan(ValueError):
    """A fault plan that cannot be used; the message says which field is wrong and why."""


@dataclass(frozen=True)
class FaultRule:
    """A scripted fault: "the first N calls for order X", "every call for order X", ..."""

    kind: FaultKind
    order_id: str = "*"
    operation: str | None = None
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

    def matches(self, operation: str, order_id: str, attempt: int) -> bool:
        return (
            (self.operation is None or self.operation == operation)
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
        if operation is not None and not isinstance(operation, str):
            raise InvalidFaultPlan(
                f"rule operation must be an operation name or null, got {operation!r}"
            )
        return cls(
            kind=kind,
            order_id=_typed(document, "orderId", str, "*"),
            operation=operation,
            attempt=_optional_int(document, "attempt"),
            skip=_typed(document, "skip", int, 0),
            times=_optional_int(document, "times"),
            delay_seconds=_optional_number(document, "delaySeconds"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "orderId": self.order_id,
            "operation": None if self.operation is None else str(self.operation),
            "attempt": self.attempt,
            "skip": self.skip,
            "times": self.times,
            "delaySeconds": self.delay_seconds,
        }


Mix = Mapping[FaultKind, float]


@dataclass(frozen=True)
class FaultPlan:
    probabilities: Mix = field(default_factory=dict)
    rules: tuple[FaultRule, ...] = ()
    latency_seconds: tuple[float, float] = (0.02, 0.2)
    retry_after_seconds: int = 1
    operation_probabilities: Mapping[str, Mix] = field(default_factory=dict)
    dispatch_after_seconds: float | None = None

    def __post_init__(self) -> None:
        _check_mix(self.probabilities, "fault probabilities")
        for operation, mix in self.operation_probabilities.items():
            _check_mix(mix, f"fault probabilities of {operation}")
        low, high = self.latency_seconds
        if not 0.0 <= low <= high:
            raise InvalidFaultPlan(
                f"latencySeconds must be [low, high] with 0 <= low <= high, got [{low}, {high}]"
            )
        if self.retry_after_seconds < 0:
            raise InvalidFaultPlan(
                f"retryAfterSeconds must be >= 0, got {self.retry_after_seconds}"
            )
        if self.dispatch_after_seconds is not None and self.dispatch_after_seconds < 0:
            raise InvalidFaultPlan(
                f"dispatchAfterSeconds must be >= 0 or null, got {self.dispatch_after_seconds}"
            )

    def mix_for(self, operation: str) -> Mix:
        return self.operation_probabilities.get(operation, self.probabilities)

    def kinds(self) -> set[FaultKind]:
        """Every kind the plan can inject."""
        mixes = [self.probabilities, *self.operation_probabilities.values()]
        drawn = {kind for mix in mixes for kind, probability in mix.items() if probability > 0}
        return drawn | {rule.kind for rule in self.rules}

    def operations(self) -> set[str]:
        """Every operation the plan names."""
        named = {rule.operation for rule in self.rules if rule.operation is not None}
        return named | set(self.operation_probabilities)

    @classmethod
    def preset(cls, name: str, service: str) -> FaultPlan:
        """The plan preset ``name`` gives ``service`` (a service's name)."""
        per_service = _SERVICE_PRESETS.get(name)
        if per_service is not None:
            return per_service.get(service, PRESETS["none"])
        try:
            return PRESETS[name]
        except KeyError:
            raise InvalidFaultPlan(
                f"unknown fault preset {name!r}; choose one of {list(PRESET_NAMES)}"
            ) from None

    @classmethod
    def from_json(cls, document: Mapping[str, Any], service: str) -> FaultPlan:
        """The plan ``document`` describes for ``service``, whose plan its ``preset`` names."""
        if not isinstance(document, Mapping):
            raise InvalidFaultPlan("a fault plan is a JSON object")
        _refuse_unknown_keys(document, _PLAN_KEYS, "fault plan")
        plan = cls.preset(_typed(document, "preset", str, "none"), service)
        changes: dict[str, Any] = {}
        if "probabilities" in document:
            changes["probabilities"] = _mix(document["probabilities"], "probabilities")
        if "operationProbabilities" in document:
            changes["operation_probabilities"] = _operation_mixes(
                document["operationProbabilities"]
            )
        if "rules" in document:
            rules = document["rules"]
            if not isinstance(rules, list) or not all(isinstance(r, Mapping) for r in rules):
                raise InvalidFaultPlan("rules must be a list of objects")
            changes["rules"] = tuple(FaultRule.from_json(rule) for rule in rules)
        if "latencySeconds" in document:
            changes["latency_seconds"] = _latency_range(document["latencySeconds"])
        if "retryAfterSeconds" in document:
            changes["retry_after_seconds"] = _typed(document, "retryAfterSeconds", int, 1)
        if "dispatchAfterSeconds" in document:
            changes["dispatch_after_seconds"] = _optional_number(document, "dispatchAfterSeconds")
        return replace(plan, **changes)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "probabilities": _mix_json(self.probabilities),
            "rules": [rule.to_json() for rule in self.rules],
            "latencySeconds": list(self.latency_seconds),
            "retryAfterSeconds": self.retry_after_seconds,
        }
        if self.operation_probabilities:
            document["operationProbabilities"] = {
                operation: _mix_json(mix) for operation, mix in self.operation_probabilities.items()
            }
        if self.dispatch_after_seconds is not None:
            document["dispatchAfterSeconds"] = self.dispatch_after_seconds
        return document


_PLAN_KEYS = frozenset(
    {
        "preset",
        "probabilities",
        "operationProbabilities",
        "rules",
        "latencySeconds",
        "retryAfterSeconds",
        "dispatchAfterSeconds",
    }
)
_RULE_KEYS = frozenset({"kind", "orderId", "operation", "attempt", "skip", "times", "delaySeconds"})


def _check_mix(mix: Mix, what: str) -> None:
    for kind, probability in mix.items():
        if not 0.0 <= probability <= 1.0:
            raise InvalidFaultPlan(f"probability of {kind} must be in [0, 1], got {probability}")
    total = sum(mix.values())
    if total > 1.0 + 1e-9:
        raise InvalidFaultPlan(f"{what} add up to {total:.3f}; at most 1 allowed")


def _mix_json(mix: Mix) -> dict[str, float]:
    return {kind.value: probability for kind, probability in mix.items()}


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


def _mix(value: Any, what: str) -> dict[FaultKind, float]:
    if not isinstance(value, Mapping):
        raise InvalidFaultPlan(f"{what} must be an object of kind -> probability")
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


def _operation_mixes(value: Any) -> dict[str, dict[FaultKind, float]]:
    if not isinstance(value, Mapping):
        raise InvalidFaultPlan("operationProbabilities must be an object of operation -> mix")
    return {
        str(operation): _mix(mix, f"operationProbabilities.{operation}")
        for operation, mix in value.items()
    }


def _latency_range(value: Any) -> tuple[float, float]:
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        raise InvalidFaultPlan(f"latencySeconds must be [low, high] in seconds, got {value!r}")
    return float(value[0]), float(value[1])


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
"""The presets every service gets alike."""

_NOISE: Mix = {FaultKind.TRANSIENT: 0.05, FaultKind.LATENCY: 0.05, FaultKind.LOST_RESPONSE: 0.02}
_FAILING_COMPENSATION: Mix = {
    FaultKind.TRANSIENT: 0.15,
    FaultKind.LATENCY: 0.10,
    FaultKind.LOST_RESPONSE: 0.05,
    FaultKind.HANG: 0.05,
    FaultKind.PERMANENT: 0.05,
}


def _noise_with(operations: Mapping[str, Mix]) -> FaultPlan:
    return FaultPlan(probabilities=_NOISE, operation_probabilities=operations)


_DECLINED_CHARGE: Mix = {**_NOISE, FaultKind.PERMANENT: 0.15}
_REFUSED_SHIPMENT: Mix = {**_NOISE, FaultKind.PERMANENT: 0.05}

_SERVICE_PRESETS: Mapping[str, Mapping[str, FaultPlan]] = {
    "declines": {
        "stock": _noise_with({}),
        "payment": _noise_with({"charge": _DECLINED_CHARGE}),
        "shipping": _noise_with(
            {"ship": _REFUSED_SHIPMENT, "cancel": {**_NOISE, FaultKind.DISPATCHED: 0.5}}
        ),
    },
    "compensation-faults": {
        "stock": _noise_with({"release": _FAILING_COMPENSATION}),
        "payment": _noise_with({"charge": _DECLINED_CHARGE, "refund": _FAILING_COMPENSATION}),
        "shipping": _noise_with(
            {
                "ship": _REFUSED_SHIPMENT,
                "cancel": {**_FAILING_COMPENSATION, FaultKind.DISPATCHED: 0.3},
            }
        ),
    },
}
"""The presets that give each service a mix of its own, by preset name then service name."""

PRESET_NAMES: tuple[str, ...] = (*PRESETS, *_SERVICE_PRESETS)
