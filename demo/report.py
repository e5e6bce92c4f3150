"""The demo's report: what happened to every order, and what it cost (C9 visibility).

``lost`` orders were submitted but have no state record; ``stuck`` ones have a record that
never reached a final state. Either, or a side effect performed twice at the fulfilment
service, makes the run fail: those are the failures this pattern exists to prevent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FINAL_STATES = frozenset({"Processed", "Error", "Compensated", "CompensationFailed"})


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return round(ordered[rank - 1], 1)


@dataclass
class DemoReport:
    orders: int
    final_states: dict[str, int]
    lost: list[str]
    stuck: list[str]
    dead_lettered: int
    dead_letter_reasons: dict[str, dict[str, int]]
    status_messages: dict[str, int]
    double_side_effects: int
    stale_writes_refused: dict[str, int]
    latency_ms: dict[str, float | None]
    per_order: dict[str, float]
    supervisor_retries: int
    submitted: dict[str, int]
    duration_seconds: float
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.lost or self.stuck or self.double_side_effects)

    def to_json(self) -> dict[str, Any]:
        document = {
            "orders": self.orders,
            "final_states": self.final_states,
            "lost": len(self.lost),
            "stuck": len(self.stuck),
            "lost_orders": self.lost,
            "stuck_orders": self.stuck,
            "dead_lettered": self.dead_lettered,
            "dead_letter_reasons": self.dead_letter_reasons,
            "status_messages": self.status_messages,
            "double_side_effects": self.double_side_effects,
            "stale_writes_refused": sum(self.stale_writes_refused.values()),
            "stale_writes_refused_by": self.stale_writes_refused,
            "latency_ms": self.latency_ms,
            "per_order": self.per_order,
            "supervisor_retries": self.supervisor_retries,
            "submitted": self.submitted,
            "duration_seconds": self.duration_seconds,
            "orders_per_second": round(self.orders / self.duration_seconds, 1)
            if self.duration_seconds
            else None,
            "settings": self.settings,
            "result": "failed" if self.failed else "passed",
        }
        return document

    def render(self) -> str:
        lines = [
            f"Orders: {self.orders} valid, submitted as {self.submitted}",
            f"Final states: {_pairs(self.final_states)}",
            f"Lost: {len(self.lost)}   Stuck: {len(self.stuck)}   "
            f"Double side effects: {self.double_side_effects}",
            f"Supervisor retries: {self.supervisor_retries}   Stale writes refused: "
            f"{_pairs(self.stale_writes_refused)}",
            f"Dead-lettered: {self.dead_lettered}",
        ]
        for queue, reasons in sorted(self.dead_letter_reasons.items()):
            lines.append(f"  {queue}: {_pairs(reasons)}")
        lines += [
            f"Status messages received: {_pairs(self.status_messages)}",
            f"End-to-end latency: p50 {self.latency_ms['p50']} ms, p95 {self.latency_ms['p95']} ms",
            f"Cost per order: {self.per_order['store_reads']} store reads, "
            f"{self.per_order['store_writes']} store writes, "
            f"{self.per_order['messages']} Service Bus messages" + _request_units(self.per_order),
            f"Duration: {self.duration_seconds:.1f} s",
            "Result: " + ("FAILED" if self.failed else "passed"),
        ]
        if self.lost:
            lines.append(f"  lost: {', '.join(self.lost[:10])}")
        if self.stuck:
            lines.append(f"  stuck: {', '.join(self.stuck[:10])}")
        return "\n".join(lines)


def _request_units(per_order: Mapping[str, float]) -> str:
    """Cosmos DB request units per order; SQLite has none to report."""
    charge = per_order.get("request_charge", 0.0)
    return f", {charge} request units" if charge else ""


def _pairs(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(counts.items())) or "none"
