"""The simulated fulfilment service, the version-1 workflow's remote service (E7-E9, C1, C8).

An HTTP service on loopback that fulfils orders once per idempotency key, refuses stale
attempts with a fencing token, cancels fulfilments as compensation, records every side effect,
and injects faults on demand. It is one of the simulated services of `simulators.services`
(declared there as ``FULFILMENT``), served at the root of their port: this package is its
entry point under the names the version-1 agent's tests and the demo use, and
``python -m tools.simulators.fulfilment`` runs the same command as
``python -m tools.simulators.services``.
"""

from tools.simulators.fulfilment.service import (
    FulfilmentService,
    FulfilmentServiceThread,
    Operation,
)
from tools.simulators.services.declarations import SideEffectKind
from tools.simulators.services.faults import (
    PRESETS,
    FaultKind,
    FaultPlan,
    FaultRule,
    InvalidFaultPlan,
)
from tools.simulators.services.ledger import SideEffect

__all__ = [
    "PRESETS",
    "FaultKind",
    "FaultPlan",
    "FaultRule",
    "FulfilmentService",
    "FulfilmentServiceThread",
    "InvalidFaultPlan",
    "Operation",
    "SideEffect",
    "SideEffectKind",
]
