"""Simulated remote services the order agents call: stock, payment and shipping (the steps
``reserve-stock``, ``charge-payment`` and ``ship-order``), with idempotency keys and fencing
tokens enforced at the target (E7, C8), compensations by resource id or, for an action whose
outcome is in doubt, by idempotency key, that can fail or stall (C1, C2), fault injection on
demand (E6-E9) and a ledger of every side effect as evidence.

One implementation runs them all; each service is a `ServiceDeclaration`. Modules:
`declarations` (the services and their paths), `payloads` (request bodies), `api` (the HTTP
API, its reference), `ledger` (idempotency, fencing, evidence), `journal` (the optional ledger
file), `faults` (fault plans and presets), `injector` (deciding each request's fault), `server`
(in-process, background-thread and command-line runners: ``python -m tools.simulators.services``).
"""

from tools.simulators.services.declarations import (
    PAYMENT,
    SERVICES,
    SHIPPING,
    STOCK,
    Role,
    ServiceDeclaration,
    SideEffectKind,
    preset_plans,
)
from tools.simulators.services.faults import (
    PRESET_NAMES,
    PRESETS,
    FaultKind,
    FaultPlan,
    FaultRule,
    InvalidFaultPlan,
)
from tools.simulators.services.journal import CorruptJournal
from tools.simulators.services.ledger import SideEffect, Tombstone
from tools.simulators.services.server import SimulatedServices, SimulatedServicesThread

__all__ = [
    "PAYMENT",
    "PRESETS",
    "PRESET_NAMES",
    "SERVICES",
    "SHIPPING",
    "STOCK",
    "CorruptJournal",
    "FaultKind",
    "FaultPlan",
    "FaultRule",
    "InvalidFaultPlan",
    "Role",
    "ServiceDeclaration",
    "SideEffect",
    "SideEffectKind",
    "SimulatedServices",
    "SimulatedServicesThread",
    "Tombstone",
    "preset_plans",
]
