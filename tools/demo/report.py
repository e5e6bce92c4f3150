"""The demo's report: what happened to every order, what it cost, and the invariants (C9).

The invariants the pattern exists to keep, each checked on evidence from the state store
and the simulated services' ledgers (`demo.evidence`), never on the app's own counters:
- no order is ``lost`` (submitted, but no state record, and not answered ``rejected`` by
  admission control, C5) or ``stuck`` (no final state when the settle time ran out);
- no side effect happened twice (``double_side_effects``: an action performed more than
  once for one order, at any service);
- every order that ended ``Compensated`` or in ``Error`` left nothing behind (``net_effects``:
  actions minus compensations per service is zero);
- no service performed an action for an order after it began compensating
  (``steps_after_compensation``).
Any broken invariant fails the run (``broken_invariants``, exit code 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tools import cost as cost_model

FINAL_STATES = frozenset({"Processed", "Error", "Compensated", "CompensationFailed"})


def lost_orders(records: Mapping[str, object | None], rejected: Sequence[str]) -> list[str]:
    """Orders with no state record that admission control did not reject (C5): lost."""
    refused = set(rejected)
    return sorted(o for o, record in records.items() if record is None and o not in refused)


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
    double_side_effects: dict[str, int]
    """Per service: orders whose action was performed more than once."""
    stale_writes_refused: dict[str, int]
    latency_ms: dict[str, float | None]
    per_order: dict[str, float]
    supervisor: dict[str, int]
    submitted: dict[str, int]
    duration_seconds: float
    in_progress_by_step: dict[str, int] = field(default_factory=dict)
    step_latency_ms: dict[str, dict[str, float | None]] = field(default_factory=dict)
    start_latency_ms: dict[str, float | None] = field(default_factory=dict)
    """Acceptance to the first agent request a service served, p50 and p95."""
    agent_retries: int = 0
    compensations: dict[str, int] = field(default_factory=dict)
    net_effects: dict[str, dict[str, int]] = field(default_factory=dict)
    net_effect_orders: list[str] = field(default_factory=list)
    steps_after_compensation: list[str] = field(default_factory=list)
    compensation_began: dict[str, str] = field(default_factory=dict)
    actions_refused_after_undo: int = 0
    operator_alerts: dict[str, int] = field(default_factory=dict)
    rejected: list[str] = field(default_factory=list)
    """Orders answered `rejected` (C5): refused at the backlog bound, stored nowhere."""
    scripted_paths: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    consumer_lag: dict[str, dict[str, int]] = field(default_factory=dict)
    measured_window: dict[str, float] = field(default_factory=dict)
    """`start` and `end` of what `duration_seconds` measures, on the system's monotonic clock
    (one clock for every process on the machine), for tools that sample the run."""
    """Per queue: the most and the last active messages the broker counted during the run."""
    cost: dict[str, Any] = field(default_factory=dict)
    """The Azure cost of 1,000 orders like the run's and the cost at rest (`tools.cost`)."""
    run_counts: cost_model.RunCounts | None = None
    """The counts `cost` is computed from (its histories' once the host stopped)."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """The app's metrics merged from the run's telemetry file (`demo.metrics.section`);
    empty without one. Counters only: never evidence for an invariant."""

    @property
    def supervisor_retries(self) -> int:
        return self.supervisor.get("retries", 0)

    @property
    def broken_invariants(self) -> list[str]:
        broken = []
        if self.lost:
            broken.append(f"{len(self.lost)} orders lost")
        if self.stuck:
            broken.append(f"{len(self.stuck)} orders stuck")
        doubled = sum(self.double_side_effects.values())
        if doubled:
            broken.append(f"{doubled} double side effects")
        if self.net_effect_orders:
            broken.append(
                f"{len(self.net_effect_orders)} compensated or failed orders left side effects"
            )
        if self.steps_after_compensation:
            broken.append(f"{len(self.steps_after_compensation)} steps after compensation")
        return broken

    @property
    def failed(self) -> bool:
        return bool(self.broken_invariants)

    @property
    def paths_shown(self) -> dict[str, bool]:
        """Which of the pattern's paths this run went through."""
        orders_dead = self.dead_letter_reasons.get("orders", {})
        return {
            "agent_retries": self.agent_retries > 0,
            "supervisor_retries": self.supervisor_retries > 0,
            "error": self.final_states.get("Error", 0) > 0,
            "compensated": self.final_states.get("Compensated", 0) > 0,
            "compensation_failed": self.final_states.get("CompensationFailed", 0) > 0,
            "conflict_dead_letters": orders_dead.get("OrderConflict", 0) > 0,
            "malformed_dead_letters": orders_dead.get("InvalidMessage", 0) > 0,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "orders": self.orders,
            "final_states": self.final_states,
            "lost": len(self.lost),
            "stuck": len(self.stuck),
            "lost_orders": self.lost,
            "rejected": len(self.rejected),
            "stuck_orders": self.stuck,
            "dead_lettered": self.dead_lettered,
            "dead_letter_reasons": self.dead_letter_reasons,
            "status_messages": self.status_messages,
            "in_progress_by_step": self.in_progress_by_step,
            "operator_alerts": self.operator_alerts,
            "double_side_effects": sum(self.double_side_effects.values()),
            "double_side_effects_by": self.double_side_effects,
            "stale_writes_refused": sum(self.stale_writes_refused.values()),
            "stale_writes_refused_by": self.stale_writes_refused,
            "actions_refused_after_undo": self.actions_refused_after_undo,
            "compensations": self.compensations,
            "net_effects": self.net_effects,
            "net_effect_orders": self.net_effect_orders,
            "steps_after_compensation": len(self.steps_after_compensation),
            "steps_after_compensation_detail": self.steps_after_compensation,
            "compensation_began": self.compensation_began,
            "latency_ms": self.latency_ms,
            "step_latency_ms": self.step_latency_ms,
            "start_latency_ms": self.start_latency_ms,
            "per_order": self.per_order,
            "agent_retries": self.agent_retries,
            "supervisor_retries": self.supervisor_retries,
            "supervisor": self.supervisor,
            "scripted_paths": self.scripted_paths,
            "paths_shown": self.paths_shown,
            "submitted": self.submitted,
            "duration_seconds": self.duration_seconds,
            "orders_per_second": round(self.orders / self.duration_seconds, 1)
            if self.duration_seconds
            else None,
            "settings": self.settings,
            "consumer_lag": self.consumer_lag,
            "measured_window": self.measured_window,
            "metrics": self.metrics,
            "cost": self.cost,
            "broken_invariants": self.broken_invariants,
            "result": "failed" if self.failed else "passed",
        }

    def render(self) -> str:
        lines = [
            f"Orders: {self.orders} valid, submitted as {self.submitted}",
            f"Final states: {_pairs(self.final_states)}",
            f"Lost: {len(self.lost)}   Stuck: {len(self.stuck)}   "
            f"Rejected at the backlog bound: {len(self.rejected)}   "
            f"Double side effects: {sum(self.double_side_effects.values())}",
            f"Agent retries: {self.agent_retries}   Supervisor: {_pairs(self.supervisor)}",
            f"Compensations: {_pairs(self.compensations)}   Actions refused after undo: "
            f"{self.actions_refused_after_undo}",
            "Net effects of Compensated orders: "
            + "; ".join(
                f"{service} " + ", ".join(f"{name} {count}" for name, count in effects.items())
                for service, effects in self.net_effects.items()
            ),
            f"Steps after compensation: {len(self.steps_after_compensation)}",
            f"Stale writes refused: {_pairs(self.stale_writes_refused)}",
            f"Dead-lettered: {self.dead_lettered}",
        ]
        for queue, reasons in sorted(self.dead_letter_reasons.items()):
            lines.append(f"  {queue}: {_pairs(reasons)}")
        lines += [
            f"Operator alerts: {_pairs(self.operator_alerts)}",
            f"Status messages received: {_pairs(self.status_messages)}",
            f"  in-progress by step: {_pairs(self.in_progress_by_step)}",
            f"End-to-end latency: p50 {self.latency_ms['p50']} ms, p95 {self.latency_ms['p95']} ms",
        ]
        if self.start_latency_ms:
            lines.append(
                f"  accepted to first agent request: p50 {self.start_latency_ms['p50']} ms, "
                f"p95 {self.start_latency_ms['p95']} ms"
            )
        for step, latency in self.step_latency_ms.items():
            lines.append(f"  {step}: p50 {latency['p50']} ms, p95 {latency['p95']} ms")
        lines += [
            f"Cost per order: {self.per_order['store_reads']} store reads, "
            f"{self.per_order['store_writes']} store writes, "
            f"{self.per_order['messages']} Service Bus messages" + _request_units(self.per_order),
            f"Duration: {self.duration_seconds:.1f} s",
        ]
        lines += _lag_lines(self.consumer_lag)
        if self.cost:
            lines += cost_model.render_section(self.cost)
        lines += _metrics_lines(self.metrics)
        if self.scripted_paths:
            lines.append("Scripted paths:")
            for path in self.scripted_paths:
                reached, expected = path["reached"], path["expected"]
                note = "" if reached == expected else f" (expected {expected})"
                lines.append(f"  {path['orderId']}: {reached}{note} - {path['path']}")
        shown = self.paths_shown
        lines.append(
            "Paths shown: "
            + ", ".join(name.replace("_", " ") for name, seen in shown.items() if seen)
        )
        missing = [name.replace("_", " ") for name, seen in shown.items() if not seen]
        if missing:
            lines.append(f"Paths not shown: {', '.join(missing)}")
        lines.append("Result: " + ("FAILED" if self.failed else "passed"))
        lines += [f"  broken: {broken}" for broken in self.broken_invariants]
        if self.lost:
            lines.append(f"  lost: {', '.join(self.lost[:10])}")
        if self.stuck:
            lines.append(f"  stuck: {', '.join(self.stuck[:10])}")
        lines += [f"  left behind: {order}" for order in self.net_effect_orders[:10]]
        lines += [f"  after compensation: {step}" for step in self.steps_after_compensation[:10]]
        return "\n".join(lines)


def _lag_lines(lag: Mapping[str, Mapping[str, int]]) -> list[str]:
    busy = {queue: counts for queue, counts in lag.items() if counts["max"]}
    if not lag:
        return []
    return [
        "Consumer lag (active messages, max/final): "
        + (", ".join(f"{queue} {c['max']}/{c['final']}" for queue, c in busy.items()) or "none")
    ]


def _metrics_lines(section: Mapping[str, Any]) -> list[str]:
    """The metrics section in a few lines (report.json holds all of it)."""
    if not section:
        return []
    orders = section["orders"]
    supervisor = section["supervisor"]
    backlog = section["backlog"]
    lines = [
        f"Metrics (merged from the telemetry file of {section['processes']} app process(es)):",
        f"  orders: {_pairs(orders)}",
        f"  order latency, {section['latency_note']}:",
    ]
    for name, latency in section["order_latency"].items():
        lines.append(
            f"    {name}: {latency['count']} orders, p50 {latency['p50_ms']} ms, "
            f"p95 {latency['p95_ms']} ms"
        )
    lines.append("  step latency (bucket-estimated):")
    for step, latency in section["step_latency"].items():
        lines.append(
            f"    {step}: {latency['count']} answers, p50 {latency['p50_ms']} ms, "
            f"p95 {latency['p95_ms']} ms"
        )
    lines += [
        f"  step retries: {_pairs(section['step_retries'])}",
        "  step failures: "
        + (
            "; ".join(
                f"{step} {_pairs(reasons)}" for step, reasons in section["step_failures"].items()
            )
            or "none"
        ),
        "  dead letters: "
        + (
            "; ".join(
                f"{queue} {_pairs(reasons)}" for queue, reasons in section["dead_letters"].items()
            )
            or "none"
        ),
        f"  supervisor: {_pairs(supervisor)}",
        "  backlog (gauges, max/last): "
        + ", ".join(
            f"{label} {backlog[key]['max']}/{backlog[key]['final']}{unit}"
            for label, key, unit in (
                ("Pending orders", "pending", ""),
                ("unfinished orders", "unfinished", ""),
                ("oldest Pending age", "oldest_pending_age_s", " s"),
            )
        ),
    ]
    return lines


def _request_units(per_order: Mapping[str, float]) -> str:
    """Cosmos DB request units per order; SQLite has none to report."""
    charge = per_order.get("request_charge", 0.0)
    return f", {charge} request units" if charge else ""


def _pairs(counts: Mapping[str, Any]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(counts.items())) or "none"
