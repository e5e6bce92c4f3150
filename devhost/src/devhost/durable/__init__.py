"""The devhost's Durable Functions engine: orchestrations through the SDK's own
replay engine, SQLite state, at-least-once activities, virtual or real time, and the
Durable extension's HTTP management API for the SDK's unchanged ``DurableOrchestrationClient``.
"""

from devhost.clock import Clock, RealClock, VirtualClock
from devhost.durable.engine import (
    DEFAULT_MAX_CONCURRENT_ACTIVITIES,
    DurableEngine,
    EngineStalledError,
)
from devhost.durable.registry import UnknownFunctionError
from devhost.durable.status import (
    DurableClientError,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    InvalidInstanceIdError,
    OrchestrationStatus,
    RuntimeStatus,
)
from devhost.durable.translation import NonDeterminismError
from devhost.durable.versioning import VersionFailureStrategy, Versioning, VersionMatchStrategy

__all__ = [
    "DEFAULT_MAX_CONCURRENT_ACTIVITIES",
    "Clock",
    "DurableClientError",
    "DurableEngine",
    "EngineStalledError",
    "InstanceAlreadyExistsError",
    "InstanceNotFoundError",
    "InvalidInstanceIdError",
    "NonDeterminismError",
    "OrchestrationStatus",
    "RealClock",
    "RuntimeStatus",
    "UnknownFunctionError",
    "VersionFailureStrategy",
    "VersionMatchStrategy",
    "Versioning",
    "VirtualClock",
]
