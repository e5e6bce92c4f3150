"""Simulated fulfilment service: the remote service the order agents call (E7, E8, E9, C1, C8).

An HTTP service on loopback that fulfils orders once per idempotency key, refuses stale
attempts with a fencing token, cancels fulfilments as compensation, records every side effect,
and injects faults on demand. Modules: `api` (the HTTP API, its reference), `ledger`
(idempotency, fencing, evidence), `journal` (the optional ledger file), `faults` (fault plans
and presets), `server` (in-process, background-thread and command-line runners).
"""

from simulators.fulfilment.faults import (
    PRESETS,
    FaultKind,
    FaultPlan,
    FaultRule,
    InvalidFaultPlan,
    Operation,
)
from simulators.fulfilment.ledger import SideEffect, SideEffectKind
from simulators.fulfilment.server import FulfilmentService, FulfilmentServiceThread

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
