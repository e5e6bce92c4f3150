"""The demo's fault mixes: a preset of the simulated services plus scripted paths.

A random mix alone rarely shows the paths users most need to see: a payment declined for good
and its reservation released, a shipment that cannot be called back. So, under every preset
but ``none``, a few orders of the workload (by index, the same for every seed) each follow a
scripted path through the pattern, on top of the preset's random faults for everyone else:

- ``order-S-00000``: the shipment is performed and dispatched but its answer is lost; every
  later try hangs. Each attempt's deadline passes, the supervisor retries twice (U4, U5),
  then gives up and starts compensating (C1); the shipment, in doubt, is cancelled by its
  idempotency key, but it was dispatched: cancelling fails for good (422 already-dispatched)
  and the order ends **CompensationFailed** with an operator alert (C2).
- ``order-S-00001``: two transient faults at stock and a lost answer at payment: the agents
  retry with the same idempotency keys and the payment is replayed, not repeated (E9, C8).
  **Processed**.
- ``order-S-00002``: stock hangs for the whole first attempt; the deadline passes (E2, E6),
  the supervisor retries (U4) and the second attempt completes. **Processed**.
- ``order-S-00003``: stock refuses the reservation for good, the first step: **Error**, a
  ``failed`` status and an ``order-error`` alert (E8).
- ``order-S-00004``: the payment is declined for good: the charge in doubt is undone by key
  (nothing to undo) and the reservation released (C1). **Compensated**.
- ``order-S-00005``: shipping refuses the shipment for good; the refund stalls once, the
  supervisor resumes the compensation where it stopped (C2) and it completes.
  **Compensated**.

A scripted order meets only its scripted faults: a zero-delay latency rule, listed after
them, answers every other request it makes, so its path does not depend on the seed. The
paths assume the default step list (``reserve-stock``, ``charge-payment``, ``ship-order``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from tools.simulators.services import FaultKind, FaultPlan, FaultRule, preset_plans

STEP_SERVICES = ("stock", "payment", "shipping")
NO_FAULTS = "none"


@dataclass(frozen=True)
class ScriptedPath:
    """One order's scripted path: its faults by service, and the final state it leads to."""

    index: int
    path: str
    expected: str
    rules: Mapping[str, tuple[FaultRule, ...]] = field(default_factory=dict)

    def order_id(self, seed: int) -> str:
        """The workload's id of this order (`demo.client.Workload`)."""
        return f"order-{seed}-{self.index:05d}"


SCRIPTED_PATHS: tuple[ScriptedPath, ...] = (
    ScriptedPath(
        0,
        "shipment dispatched, its answer lost: supervisor retries, gives up, compensates; "
        "the dispatched shipment cannot be cancelled",
        "CompensationFailed",
        {
            "shipping": (
                FaultRule(FaultKind.LOST_RESPONSE, operation="ship", times=1),
                FaultRule(FaultKind.HANG, operation="ship"),
                FaultRule(FaultKind.DISPATCHED, operation="cancel"),
            )
        },
    ),
    ScriptedPath(
        1,
        "agent retries: two transient faults at stock, a lost answer at payment",
        "Processed",
        {
            "stock": (FaultRule(FaultKind.TRANSIENT, operation="reserve", times=2),),
            "payment": (FaultRule(FaultKind.LOST_RESPONSE, operation="charge", times=1),),
        },
    ),
    ScriptedPath(
        2,
        "supervisor retry: stock hangs through the first attempt's deadline",
        "Processed",
        {"stock": (FaultRule(FaultKind.HANG, operation="reserve", attempt=1),)},
    ),
    ScriptedPath(
        3,
        "first step fails for good: stock refuses the reservation",
        "Error",
        {"stock": (FaultRule(FaultKind.PERMANENT, operation="reserve"),)},
    ),
    ScriptedPath(
        4,
        "payment declined for good: the reservation is released",
        "Compensated",
        {"payment": (FaultRule(FaultKind.PERMANENT, operation="charge"),)},
    ),
    ScriptedPath(
        5,
        "shipment refused for good, the refund stalls once: the supervisor resumes the "
        "compensation",
        "Compensated",
        {
            "shipping": (FaultRule(FaultKind.PERMANENT, operation="ship"),),
            "payment": (FaultRule(FaultKind.HANG, operation="refund", times=1),),
        },
    ),
)


@dataclass(frozen=True)
class FaultMix:
    """What the demo gives the simulated services: each service's plan, and the scripted
    paths (by order id) those plans carry."""

    services: dict[str, FaultPlan]
    scripted: dict[str, ScriptedPath]


def fault_mix(preset: str, order_ids: Sequence[str], seed: int) -> FaultMix:
    """Preset `preset` for every service plus, unless it is ``none``, the scripted paths of
    the orders in `order_ids` (raises InvalidFaultPlan for an unknown preset)."""
    plans = preset_plans(preset)
    if preset == NO_FAULTS:
        return FaultMix(plans, {})
    present = set(order_ids)
    scripted = {
        path.order_id(seed): path for path in SCRIPTED_PATHS if path.order_id(seed) in present
    }
    for service in STEP_SERVICES:
        rules = [
            replace(rule, order_id=order_id)
            for order_id, path in scripted.items()
            for rule in path.rules.get(service, ())
        ]
        # Listed last, so only requests no scripted rule takes: no random fault for them.
        rules += [
            FaultRule(FaultKind.LATENCY, order_id=order_id, delay_seconds=0.0)
            for order_id in scripted
        ]
        plan = plans[service]
        plans[service] = replace(plan, rules=(*plan.rules, *rules))
    return FaultMix(plans, scripted)
