"""What a run's orders would cost on Azure, from its measured counts and the price table.

One model for the demo, the chaos run and the benchmark: `RunCounts` holds what a run
counted (store reads and writes, Service Bus messages sent, the executions its triggers ran)
and what its orchestration histories show (`HistoryCounts`); `cost_of_orders` prices them
per 1,000 orders with ``tools/prices.json`` (a dated table a user edits, each price with its
source), one line per meter. `at_rest` prices a month without orders under the defaults of
``infra/app-settings.json``: the timers' executions at their schedules, plus the fixed
monthly charges. A count the local run cannot take as Azure would is an estimate, or is not
measured at all, and its line says so.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from devhost.durable.history import EventType, HistoryEvent
from devhost.durable.store import DurableStore
from devhost.ncrontab import CronSchedule

REPOSITORY = Path(__file__).resolve().parents[1]
PRICES = REPOSITORY / "tools" / "prices.json"
APP_SETTINGS = REPOSITORY / "infra" / "app-settings.json"
ORDERS = 1000
HOURS_PER_MONTH = 730
# Send, receive and settle: what a message delivered once costs in operations.
OPERATIONS_PER_MESSAGE = 3
# Each of these history events is one action the Durable Task Scheduler dispatched: an
# orchestration's start, an activity's scheduling and its result, a timer completing, an
# external event, a termination, a sub-orchestration's start and result.
DTS_ACTION_EVENTS = frozenset(
    {
        EventType.EXECUTION_STARTED,
        EventType.TASK_SCHEDULED,
        EventType.TASK_COMPLETED,
        EventType.TASK_FAILED,
        EventType.TIMER_FIRED,
        EventType.EVENT_RAISED,
        EventType.EXECUTION_TERMINATED,
        EventType.SUB_ORCHESTRATION_CREATED,
        EventType.SUB_ORCHESTRATION_COMPLETED,
        EventType.SUB_ORCHESTRATION_FAILED,
    }
)
PER_ORDER_METERS = (
    "cosmos_request_units",
    "servicebus_operations",
    "function_executions",
    "function_execution_time",
    "dts_actions",
)
MONTHLY_METERS = ("servicebus_standard_base", "dts_consumption_base")


@dataclass(frozen=True)
class HistoryCounts:
    """What a run's orchestration histories show: orchestrator episodes, activity
    executions, and the actions the Durable Task Scheduler would bill."""

    episodes: int = 0
    activities: int = 0
    dts_actions: int = 0

    @classmethod
    def of(cls, histories: Iterable[Sequence[HistoryEvent]]) -> HistoryCounts:
        episodes = activities = actions = 0
        for history in histories:
            for event in history:
                kind = int(event["EventType"])
                episodes += kind == EventType.ORCHESTRATOR_STARTED
                activities += kind in (EventType.TASK_COMPLETED, EventType.TASK_FAILED)
                actions += kind in DTS_ACTION_EVENTS
        return cls(episodes, activities, actions)


def orchestration_histories(data_dirs: Iterable[Path]) -> dict[str, list[HistoryEvent]]:
    """Every orchestration history the hosts' Durable stores (``<data>/durable.sqlite``) hold,
    read once the hosts stopped."""
    histories: dict[str, list[HistoryEvent]] = {}
    for data_dir in data_dirs:
        path = data_dir / "durable.sqlite"
        if not path.exists():
            continue
        store = DurableStore(str(path))
        try:
            for record in store.query_instances(None, None, None):
                histories.setdefault(record.instance_id, []).extend(
                    store.history(record.instance_id)
                )
        finally:
            store.close()
    return histories


@dataclass(frozen=True)
class RunCounts:
    """A run's measured counts. ``messages_sent``: every Service Bus message sent (client
    and app); ``triggered``: messages sent to the queues the app's triggers consume, each an
    execution; ``request_units``: what the store answered, None where it has none. A count
    the run could not take is None, and ``unmeasured`` says why."""

    orders: int
    history: HistoryCounts
    store_reads: int | None = None
    store_writes: int | None = None
    messages_sent: int | None = None
    triggered: int | None = None
    request_units: float | None = None
    unmeasured: str = ""


@dataclass(frozen=True)
class MeterCost:
    meter: str
    quantity: float | None
    """Per 1,000 orders (a month for the at-rest meters); None: the run could not count it."""
    unit: str
    basis: str
    """How the quantity was counted, and what it leaves out."""
    cost: float | None
    """None: not counted, or the table has no price for the meter."""


@dataclass(frozen=True)
class Cost:
    title: str
    currency: str
    as_of: str
    lines: tuple[MeterCost, ...]

    @property
    def total(self) -> float:
        return sum(line.cost for line in self.lines if line.cost is not None)

    @property
    def left_out(self) -> list[str]:
        """The meters the total leaves out: not counted, or without a price."""
        return [line.meter for line in self.lines if line.cost is None]

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "currency": self.currency,
            "pricesAsOf": self.as_of,
            "prices": str(PRICES.relative_to(REPOSITORY)),
            "lines": [asdict(line) for line in self.lines],
            "total": round(self.total, 6),
            "leftOut": self.left_out,
        }


def load_prices(path: Path = PRICES) -> dict[str, Any]:
    prices: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return prices


def _priced(meter: Mapping[str, Any], quantity: float | None) -> float | None:
    price = meter.get("price")
    if price is None or quantity is None:
        return None
    return float(price) * quantity / float(meter.get("per", 1))


def cost_of_orders(counts: RunCounts, prices: Mapping[str, Any] | None = None) -> Cost:
    """The Azure cost of 1,000 orders like the run's, one line per meter."""
    prices = prices or load_prices()
    meters = prices["per_order"]
    scale = ORDERS / max(1, counts.orders)
    history = counts.history
    not_measured = f"not measured: {counts.unmeasured}"
    quantities: dict[str, tuple[float | None, str, str]] = {
        "cosmos_request_units": (None, "request units", not_measured),
        "servicebus_operations": (None, "operations", not_measured),
        "function_executions": (
            (history.episodes + history.activities) * scale,
            "executions",
            f"{history.episodes * scale:,.0f} orchestrator episodes and "
            f"{history.activities * scale:,.0f} activities from the histories; Service "
            f"Bus-triggered executions {not_measured}",
        ),
        "function_execution_time": (
            None,
            "GB-s",
            "not measured: it depends on the load and the instances' memory, not on the counts "
            "(docs/deployment.md, 'What it costs')",
        ),
        "dts_actions": (
            history.dts_actions * scale,
            "actions",
            "from the histories: each orchestration start, activity scheduled and its result, "
            "timer fired and external event",
        ),
    }
    if counts.store_reads is not None and counts.store_writes is not None:
        estimates = prices["request_unit_estimates"]
        reads, writes = counts.store_reads * scale, counts.store_writes * scale
        measured = (
            f"; the run's store answered {counts.request_units * scale:,.1f}, as a local "
            "server answers: 1 a request"
            if counts.request_units
            else ""
        )
        quantities["cosmos_request_units"] = (
            reads * float(estimates["read"]) + writes * float(estimates["write"]),
            "request units",
            f"estimate: {reads:,.0f} reads x {estimates['read']} RU and {writes:,.0f} writes x "
            f"{estimates['write']} RU{measured}",
        )
    if counts.messages_sent is not None:
        quantities["servicebus_operations"] = (
            counts.messages_sent * OPERATIONS_PER_MESSAGE * scale,
            "operations",
            f"estimate: {counts.messages_sent * scale:,.0f} messages sent, each sent, received "
            "and settled once; redeliveries not counted; the base charge includes 13 million "
            "a month",
        )
    if counts.triggered is not None:
        quantities["function_executions"] = (
            (counts.triggered + history.episodes + history.activities) * scale,
            "executions",
            f"{history.episodes * scale:,.0f} orchestrator episodes and "
            f"{history.activities * scale:,.0f} activities from the histories, "
            f"{counts.triggered * scale:,.0f} Service Bus-triggered (one per message sent to "
            "the app's queues, an estimate)",
        )
    lines = tuple(
        MeterCost(meters[name]["meter"], quantity, unit, basis, _priced(meters[name], quantity))
        for name, (quantity, unit, basis) in quantities.items()
    )
    return Cost("Azure cost of 1,000 orders", prices["currency"], prices["as_of"], lines)


def firings_per_month(expression: str) -> float:
    """How often an NCRONTAB schedule fires in a month of 730 hours (counted over a day)."""
    schedule = CronSchedule.parse(expression)
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    end = start + dt.timedelta(days=1)
    count, moment = 0, start - dt.timedelta(seconds=1)
    while (moment := schedule.next_after(moment)) < end:
        count += 1
    return count * HOURS_PER_MONTH / 24


def default_schedules(path: Path = APP_SETTINGS) -> dict[str, str]:
    """The timer schedules (``*_SCHEDULE``) the deployment's app settings set."""
    settings = json.loads(path.read_text(encoding="utf-8"))
    return {name: str(value) for name, value in settings.items() if name.endswith("_SCHEDULE")}


def at_rest(
    prices: Mapping[str, Any] | None = None, schedules: Mapping[str, str] | None = None
) -> Cost:
    """A month without orders under the default schedules: the timers' executions, and the
    fixed monthly charges."""
    prices = prices or load_prices()
    schedules = default_schedules() if schedules is None else schedules
    executions = prices["per_order"]["function_executions"]
    lines = [
        MeterCost(
            f"{executions['meter']}, {name}",
            (fired := firings_per_month(expression)),
            "executions",
            f"timer at {expression!r} (infra/app-settings.json); its store reads not counted",
            _priced(executions, fired),
        )
        for name, expression in sorted(schedules.items())
    ]
    lines += [
        MeterCost(meter["meter"], 1, "month", "fixed monthly charge", _priced(meter, 1))
        for meter in (prices["monthly"][name] for name in MONTHLY_METERS)
    ]
    return Cost(
        "Cost at rest per month of the defaults", prices["currency"], prices["as_of"], tuple(lines)
    )


def section(counts: RunCounts) -> dict[str, Any]:
    """The report's ``cost`` section: the cost of 1,000 orders and the cost at rest."""
    prices = load_prices()
    return {
        "orders": cost_of_orders(counts, prices).to_json(),
        "atRest": at_rest(prices).to_json(),
    }


def render_section(section: Mapping[str, Any]) -> list[str]:
    """The lines a report prints for its ``cost`` section."""
    lines: list[str] = []
    for cost in (section["orders"], section["atRest"]):
        lines.append(
            f"{cost['title']} ({cost['currency']}, prices of {cost['pricesAsOf']} from "
            f"{cost['prices']}):"
        )
        for line in cost["lines"]:
            if line["quantity"] is None:
                lines.append(f"  {line['meter']}: {line['basis']}")
                continue
            priced = "no price in the table" if line["cost"] is None else f"{line['cost']:.4f}"
            lines.append(
                f"  {line['meter']}: {line['quantity']:,.1f} {line['unit']}, {priced} "
                f"({line['basis']})"
            )
        excluded = f", without {', '.join(cost['leftOut'])}" if cost["leftOut"] else ""
        lines.append(f"  total: {cost['total']:.4f}{excluded}")
    return lines
