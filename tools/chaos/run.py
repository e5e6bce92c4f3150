"""``python -m tools.chaos``: the order pipeline under faults and crashes, then the proof.

Each piece runs as a process of its own, so each can be killed with SIGKILL mid-order and
started again on the same files and port: the embedded broker with its ``--data`` journal,
the simulated services with their ledger journal, the chaos fault mix and a few orders'
compensations scripted to fail or stall (`chaos.schedule.chaos_plans`), and three devhosts
(``python -m devhost start``, one language worker each; `chaos.topology`) over one state
store and orders database, each with its orchestration histories in the work directory. The
stores are the embedded default (SQLite files in the work directory) or, with ``backend``
``cosmos``, the Cosmos DB adapter on a local Cosmos DB API server this run starts and stops
(`devhost.cosmos_server`; it is never killed: on Azure the database is a managed service,
not a process of the app). This
process submits the workload (the demo's: valid orders, exact resends, conflicting copies,
malformed messages) at a steady rate, resending a batch the broker did not take (ids are
stable, resends are idempotent: S2, C6), relays the agents' answers (`chaos.relay`), and
follows the seeded crash schedule: it kills and restarts the devhosts, the broker and the
services (C10) and plays a starter that dies between claim and start (D3, U4). It samples the
state store every ``SAMPLE_SECONDS`` (the time series of submitted, in-flight and finished
orders) and, once every order is final and owes no message (C6) or the settle time has passed,
stops the devhosts and the services, checks the invariants (`chaos.invariants`) on the
ledgers, the state store and the queues, and prices the run's orders from the counts its
histories give (`tools.cost`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from devhost.servicebus.process import BrokerProcess

import bootstrap
from config import Settings
from domain.agent_messages import AgentOperation
from domain.ports import Page, StoreMetrics
from domain.records import ProcessState, StateRecord, parse_utc
from services.starter import claim_pending
from tools import cost
from tools.chaos.invariants import (
    FINAL_STATUS,
    Findings,
    QueueMessage,
    check,
    forgotten_side_effects,
)
from tools.chaos.processes import HostProcess, ServicesProcess
from tools.chaos.relay import ResponseRelay
from tools.chaos.schedule import Crash, CrashKind, chaos_plans, compensation_script, crash_schedule
from tools.chaos.topology import AGENT_RESPONSES_RELAYED, broker_config, host_settings
from tools.demo.client import Outgoing, Workload
from tools.demo.pipeline import (
    BROKER_CONFIG,
    DEMO_REPLY_QUEUE,
    LOCAL_SETTINGS,
    REPOSITORY,
    local_store_settings,
    sample_settings,
)
from tools.demo.progress import ProgressLine
from tools.demo.report import FINAL_STATES, percentile
from tools.demo.run import peek_all
from tools.simulators.services import SERVICES

SAMPLE_SECONDS = 1.0
SEND_BATCH = 20
SEND_TIMEOUT_SECONDS = 10.0
RESEND_PAUSE_SECONDS = 1.0
# A conflicting copy goes out once its original is stored (S3 refuses the later of the two).
ORIGINALS_BOUND_SECONDS = 120.0
# Settled: every submitted order final, or nothing changed for this long.
QUIET_SECONDS = 30.0
RESTART_PAUSE_SECONDS = 1.0
# Crashes spread over the submission window, or over this long when submitting is quicker.
MIN_CRASH_WINDOW_SECONDS = 30.0
# A scripted slow compensation answers, and the relay's first late answer is forwarded, this
# long after its deadline would have passed.
SLOW_PAST_DEADLINE_SECONDS = 2.0
DO, UNDO = AgentOperation.DO.value, AgentOperation.UNDO.value
# Step and claim deadlines as the demo's; compensations get as long as a step (C2).
CHAOS_SETTINGS: dict[str, str] = {
    "COMPENSATION_TIMEOUT_SECONDS": "10",
    "DEADLETTER_WATCH_SCHEDULE": "*/2 * * * * *",
}
DEFAULT_CRASHES: dict[CrashKind, int] = {
    CrashKind.DEVHOST: 3,
    CrashKind.BROKER: 2,
    CrashKind.SERVICES: 2,
    CrashKind.CLAIM: 2,
}
# The claims a starter that dies between claim and start leaves behind, per crash.
ABANDONED_CLAIMS = 5
CLAIM_RACE_SECONDS = 20.0
CLAIM_RACE_PAUSE_SECONDS = 0.01
# The app's store and message counters live in the devhost processes the run kills; the
# histories outlive them in the work directory.
UNMEASURED = (
    "the app's counters die with the devhost processes this run kills (make demo measures it)"
)
UNFINISHED = (ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.COMPENSATING)


@dataclass(frozen=True)
class ChaosOptions:
    orders: int = 2000
    seed: int = 1
    rate: float = 15.0
    """Orders submitted per second."""
    crashes: Mapping[CrashKind, int] = field(default_factory=lambda: dict(DEFAULT_CRASHES))
    second_scheduler: bool = True
    """Run a second devhost whose starter and supervisor compete over the same store."""
    settle_seconds: float = 300.0
    work_dir: Path | None = None
    progress: bool = True
    backend: str = "sqlite"
    """The state store and orders database: one of `config.STATE_STORES`."""


@dataclass
class CrashEvent:
    kind: str
    at: float
    wall: datetime
    """When it happened, in UTC (the time the final statuses carry)."""
    restarted_at: float | None = None
    recovery_seconds: float | None = None
    """From the crash to the next order finishing (the first final status written after it,
    by the ``at`` of its status message); None for a starter that died between claim and
    start, which took no process down."""

    def recover(self, finished: Sequence[datetime]) -> None:
        """Set ``recovery_seconds`` from the times orders finished."""
        if self.kind == CrashKind.CLAIM.value:
            return
        after = [moment for moment in finished if moment > self.wall]
        if after:
            self.recovery_seconds = round((min(after) - self.wall).total_seconds(), 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "at": round(self.at, 2),
            "restartedAt": None if self.restarted_at is None else round(self.restarted_at, 2),
            "recoverySeconds": self.recovery_seconds,
        }


@dataclass
class ChaosReport:
    orders: int
    seed: int
    submitted: dict[str, int]
    final_states: dict[str, int]
    findings: Findings
    crashes: list[CrashEvent]
    service_faults: dict[str, dict[str, dict[str, int]]]
    """Per service and operation (``do``: its action, ``undo``: its compensation), the faults
    it injected by kind."""
    series: list[dict[str, float]]
    relay: dict[str, int]
    """Agent responses lost, duplicated, late, reordered (`chaos.relay`)."""
    relay_events: list[dict[str, Any]]
    """Each of them: ``{"t", "kind": "agent-response-<fate>", "messageId", "operation"}``
    (``do``, ``undo`` or None for a reordered batch), a late one with ``heldSeconds``."""
    claims_abandoned: list[str]
    """Instance ids claimed by a starter that died before starting them."""
    duration_seconds: float
    settings: dict[str, Any]
    service_fault_events: list[dict[str, Any]] = field(default_factory=list)
    """The services' faults per second, kind and service: ``{"t", "kind": "service-<kind>",
    "service", "count"}`` (`ChaosRun._count_service_faults`)."""
    service_latencies: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """Per service and operation (``do``, ``undo``), each latency fault's delay in seconds."""
    deadlines: dict[str, float] = field(default_factory=dict)
    """The timeout of a step's action (``do``, STEP_TIMEOUT_SECONDS) and of its compensation
    (``undo``, COMPENSATION_TIMEOUT_SECONDS): each request's deadline is that long after the
    write that sent it (E2, C2)."""
    cost: dict[str, Any] = field(default_factory=dict)
    """The Azure cost of 1,000 orders like the run's and the cost at rest (`tools.cost`)."""

    @property
    def failed(self) -> bool:
        return bool(self.findings.broken)

    def recovery(self, kind: str | None = None) -> dict[str, float | None]:
        """Time to recover, p50 and p95, over every crash or those of one kind."""
        times = [
            c.recovery_seconds
            for c in self.crashes
            if c.recovery_seconds is not None and kind in (None, c.kind)
        ]
        return {"p50": percentile(times, 0.5), "p95": percentile(times, 0.95)}

    def faults_injected(self) -> dict[str, dict[str, int]]:
        """Every fault injected, by kind: its ``total`` and, for the faults that hit a request
        (the services', the relay's on one response), how many hit a step's action (``do``)
        and how many its compensation (``undo``); crashes and reordered batches hit none."""
        split: dict[str, Counter[str]] = defaultdict(lambda: Counter({DO: 0, UNDO: 0}))
        for by_operation in self.service_faults.values():
            for operation, by_kind in by_operation.items():
                for kind, count in by_kind.items():
                    split[kind][operation] += count
        totals: Counter[str] = Counter({kind: c.total() for kind, c in split.items()})
        for event in self.relay_events:
            if event.get("operation") in (DO, UNDO):
                split[str(event["kind"])][event["operation"]] += 1
        totals.update({f"agent-response-{kind}": n for kind, n in self.relay.items()})
        totals.update(Counter(c.kind for c in self.crashes))
        return {
            kind: {**split.get(kind, {}), "total": total} for kind, total in sorted(totals.items())
        }

    def faults_by_kind(self) -> dict[str, int]:
        """Every fault injected, by kind (`faults_injected`'s totals)."""
        return {kind: row["total"] for kind, row in self.faults_injected().items()}

    def service_faults_by_kind(self) -> dict[str, dict[str, int]]:
        """Per service, the faults it injected by kind, action and compensation together."""
        totals: dict[str, dict[str, int]] = {}
        for name, by_operation in self.service_faults.items():
            total: Counter[str] = Counter()
            for by_kind in by_operation.values():
                total.update(by_kind)
            totals[name] = dict(total)  # a kind counted 0 stays, in first-seen order
        return totals

    def answers_past_deadline(self) -> dict[str, Any]:
        """Answers that came after their request's deadline, for sure: each at least its
        operation's timeout (`deadlines`) after its request was sent, which is after the
        write that set the deadline (E2, E6). By operation, the agent answers the relay held
        that long (``agent-response-late``) and the services' answers delayed that long
        (``latency``: the agent's call gives up at the deadline, so it hears them as a
        timeout); ``total`` both. A late answer held less may still have come too late."""
        late = Counter({DO: 0, UNDO: 0})
        for event in self.relay_events:
            held, operation = event.get("heldSeconds"), event.get("operation")
            if held is not None and operation in self.deadlines:
                late[operation] += float(held) > self.deadlines[operation]
        slow = Counter({DO: 0, UNDO: 0})
        for by_operation in self.service_latencies.values():
            for operation, delays in by_operation.items():
                if operation in self.deadlines:
                    slow[operation] += sum(1 for d in delays if d > self.deadlines[operation])
        return {
            "agent-response-late": dict(late),
            "latency": dict(slow),
            "total": late.total() + slow.total(),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "orders": self.orders,
            "seed": self.seed,
            "submitted": self.submitted,
            "final_states": self.final_states,
            "rejected": len(self.findings.rejected),
            "invariants": self.findings.to_json(),
            "broken_invariants": self.findings.broken,
            "faults_injected": self.faults_injected(),
            "answers_past_deadline": self.answers_past_deadline(),
            "service_faults": self.service_faults_by_kind(),
            "service_faults_by_operation": self.service_faults,
            "crashes": [c.to_json() for c in self.crashes],
            "claims_abandoned": self.claims_abandoned,
            "crashes_survived": sum(1 for c in self.crashes if c.restarted_at is not None),
            "recovery_seconds": self.recovery(),
            "recovery_seconds_by_kind": {
                kind: self.recovery(kind)
                for kind in sorted({c.kind for c in self.crashes if c.recovery_seconds is not None})
            },
            "compensations": self.findings.evidence.compensations,
            "supervisor": self.findings.evidence.supervisor,
            "net_effects": self.findings.evidence.net_effects,
            "timeline": {
                "note": "seconds after the first submission; counts from the state store",
                "series": self.series,
                "events": sorted(
                    [{"t": round(c.at, 2), "kind": c.kind} for c in self.crashes]
                    + [{"t": e["t"], "kind": e["kind"]} for e in self.relay_events]
                    + self.service_fault_events,
                    key=lambda event: float(event["t"]),
                ),
            },
            "duration_seconds": round(self.duration_seconds, 1),
            "settings": self.settings,
            "cost": self.cost,
            "result": "failed" if self.failed else "passed",
        }

    def render(self) -> str:
        recovery = self.recovery()
        past = self.answers_past_deadline()
        lines = [
            f"Orders: {self.orders} (seed {self.seed}, state store "
            f"{self.settings.get('state_store')}), submitted as {self.submitted}",
            f"Final states: {_pairs(self.final_states)}; rejected at the backlog bound: "
            f"{len(self.findings.rejected)}",
            "Faults injected: "
            + ", ".join(
                f"{kind} {row['total']}"
                + (f" (do {row[DO]}, undo {row[UNDO]})" if DO in row else "")
                for kind, row in self.faults_injected().items()
            ),
            f"Answers past their deadline: {past['total']} (held by the relay: "
            f"{_pairs(past['agent-response-late'])}; slow at the services: "
            f"{_pairs(past['latency'])})",
            f"Crashes survived: {sum(1 for c in self.crashes if c.restarted_at is not None)} "
            f"of {len(self.crashes)}; time to recover (crash to next order finished): "
            f"p50 {recovery['p50']} s, p95 {recovery['p95']} s; "
            + "; ".join(
                f"{kind} p50 {times['p50']} s, p95 {times['p95']} s"
                for kind, times in self.to_json()["recovery_seconds_by_kind"].items()
            ),
            f"Compensations: {_pairs(self.findings.evidence.compensations)}; supervisor: "
            f"{_pairs(self.findings.evidence.supervisor)}",
            f"Duration: {self.duration_seconds:.1f} s",
        ]
        if self.cost:
            lines += cost.render_section(self.cost)
        lines.append("Invariants:")
        for name, found in self.findings.invariants.items():
            lines.append(
                f"  {'ok  ' if not found else 'FAIL'} {name}" + (f": {len(found)}" if found else "")
            )
            lines += [f"         {example}" for example in found[:5]]
        lines.append("Result: " + ("FAILED" if self.failed else "passed"))
        return "\n".join(lines)


def _pairs(counts: Mapping[str, Any]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(counts.items())) or "none"


class Run:
    """One chaos run's processes, clock and observations."""

    def __init__(
        self, options: ChaosOptions, work_dir: Path, store_settings: Mapping[str, str]
    ) -> None:
        self.options = options
        self.work_dir = work_dir
        self.progress = ProgressLine(enabled=options.progress)
        self.workload = Workload.generate(options.orders, options.seed)
        # The app's settings that do not depend on the processes (their addresses: `start`).
        self.values: dict[str, str] = {
            **sample_settings(),
            **LOCAL_SETTINGS,
            **CHAOS_SETTINGS,
            **store_settings,
        }
        settings = self._settings
        self.script = compensation_script(
            self.workload.order_ids,
            options.seed,
            settings.order_steps,
            slow_seconds=settings.timeouts.compensation_seconds + SLOW_PAST_DEADLINE_SECONDS,
        )
        self.plans = chaos_plans(self.script)
        self.log = (work_dir / "processes.log").open("a", encoding="utf-8")
        self.broker = BrokerProcess(
            broker_config(BROKER_CONFIG, work_dir / "servicebus.config.json"),
            data=work_dir / "servicebus.sqlite",
        )
        self.services = ServicesProcess(
            work_dir / "ledger.jsonl", self.plans, options.seed, self.log
        )
        self.hosts: dict[str, HostProcess] = {}
        self.relay = ResponseRelay(
            lambda: self.broker.connection_string,
            AGENT_RESPONSES_RELAYED,
            "agent-responses",  # the scheduler's queue: AGENT_RESPONSES_QUEUE, set at start
            options.seed,
            self.now,
            past_deadline={
                DO: settings.timeouts.step_seconds + SLOW_PAST_DEADLINE_SECONDS,
                UNDO: settings.timeouts.compensation_seconds + SLOW_PAST_DEADLINE_SECONDS,
            },
        )
        self.claims_abandoned: list[str] = []
        self.ledgers_forgotten: list[str] = []
        self._stats_before_kill: dict[str, dict[str, Any]] = {}
        self.started = 0.0
        self.started_wall = 0.0
        self.service_fault_events: list[dict[str, Any]] = []
        self.submitted = 0
        self.series: list[dict[str, float]] = []
        self.crashes: list[CrashEvent] = []
        self.service_faults: dict[str, dict[str, Counter[str]]] = {
            name: {DO: Counter(), UNDO: Counter()} for name in SERVICES
        }
        self.service_latencies: dict[str, dict[str, list[float]]] = {
            name: {DO: [], UNDO: []} for name in SERVICES
        }

    def now(self) -> float:
        return time.monotonic() - self.started

    async def start(self) -> None:
        await asyncio.to_thread(self.broker.start)
        await asyncio.to_thread(self.services.start)
        self.values = {
            **self.values,
            "ServiceBusConnection": self.broker.connection_string,
            **{f"{name.upper()}_SERVICE_URL": self.services.url(name) for name in SERVICES},
            "SQLITE_DIRECTORY": str(self.work_dir / "stores"),
        }
        self.relay.target = self._settings.agent_responses_queue
        for role, settings in host_settings(
            self.values, second_scheduler=self.options.second_scheduler
        ).items():
            host = HostProcess(REPOSITORY, self.work_dir / role, settings, self.log)
            self.hosts[role] = host
            await asyncio.to_thread(host.start)

    async def stop_hosts(self) -> None:
        for host in self.hosts.values():
            await asyncio.to_thread(host.stop)

    async def stop(self) -> None:
        await self.stop_hosts()
        await asyncio.to_thread(self.services.stop)
        await asyncio.to_thread(self.broker.stop)
        self.log.close()

    # -- submitting ---------------------------------------------------------------------

    async def submit(self) -> None:
        first = [m for m in self.workload.messages if m.kind != "conflict"]
        later = [m for m in self.workload.messages if m.kind == "conflict"]
        pause = SEND_BATCH / self.options.rate
        for start in range(0, len(first), SEND_BATCH):
            due = self.started + start / self.options.rate
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            await self._send(first[start : start + SEND_BATCH])
        if later:
            await self._originals_stored({m.order_id for m in later if m.order_id})
            for start in range(0, len(later), SEND_BATCH):
                await self._send(later[start : start + SEND_BATCH])
                await asyncio.sleep(pause)

    async def _send(self, batch: Sequence[Outgoing]) -> None:
        """Send ``batch``, again and again until the broker takes it (ids are stable)."""
        while True:
            try:
                client = ServiceBusClient.from_connection_string(self.broker.connection_string)
                async with client, client.get_queue_sender(self._settings.orders_queue) as sender:
                    await sender.send_messages(
                        [
                            ServiceBusMessage(
                                m.body, message_id=m.message_id, reply_to=DEMO_REPLY_QUEUE
                            )
                            for m in batch
                        ],
                        timeout=SEND_TIMEOUT_SECONDS,
                    )
                self.submitted += sum(1 for m in batch if m.kind == "order")
                return
            except Exception:
                await asyncio.sleep(RESEND_PAUSE_SECONDS)

    async def _originals_stored(self, order_ids: set[str]) -> None:
        deadline = time.monotonic() + ORIGINALS_BOUND_SECONDS
        while time.monotonic() < deadline:
            found = await asyncio.to_thread(self._records, sorted(order_ids))
            if all(record is not None for record in found.values()):
                return
            await asyncio.sleep(SAMPLE_SECONDS)

    # -- crashing -----------------------------------------------------------------------

    async def crash(self, schedule: Sequence[Crash]) -> None:
        for planned in schedule:
            await asyncio.sleep(max(0.0, self.started + planned.at_seconds - time.monotonic()))
            await asyncio.to_thread(self._kill, planned.kind)
            # The crash is the moment everything it kills is dead (devhosts die one by one).
            event = CrashEvent(planned.kind.value, self.now(), datetime.now(UTC))
            self.crashes.append(event)
            await asyncio.sleep(RESTART_PAUSE_SECONDS)
            await asyncio.to_thread(self._restart, planned.kind)
            event.restarted_at = self.now()
            self.progress.note(
                f"{planned.kind.value} at {event.at:.1f} s, restarted at {event.restarted_at:.1f} s"
            )

    def _kill(self, kind: CrashKind) -> None:
        if kind is CrashKind.DEVHOST:
            # The machine the devhosts share goes down: every one of them at once.
            for host in self.hosts.values():
                host.kill()
        elif kind is CrashKind.BROKER:
            self.broker.kill()
        elif kind is CrashKind.SERVICES:
            self._count_service_faults()
            self.services.kill()
        elif kind is CrashKind.CLAIM:
            self._claim_and_die()

    def _claim_and_die(self) -> None:
        """A starter that claims (D3, with the app's own claim code on the shared store) and
        dies before it starts the orchestrations: the supervisor must recover the claims.
        It races the running starters for Pending records until it wins some (bounded)."""
        settings = self._settings
        deadline = time.monotonic() + CLAIM_RACE_SECONDS
        while time.monotonic() < deadline:
            run = claim_pending(
                self.states,
                datetime.now(UTC),
                bounds=replace(settings.starter_scan, max_items=ABANDONED_CLAIMS),
                timeouts=settings.timeouts,
                max_running=settings.max_running_orders,
                max_backlog=settings.max_backlog_orders,
            )
            if run.claims:
                self.claims_abandoned += [str(claim.instance_id) for claim in run.claims]
                return
            time.sleep(CLAIM_RACE_PAUSE_SECONDS)

    def _restart(self, kind: CrashKind) -> None:
        if kind is CrashKind.DEVHOST:
            for host in self.hosts.values():
                host.start()
        elif kind is CrashKind.BROKER:
            self.broker.start()
        elif kind is CrashKind.SERVICES:
            self.services.start()
            self._check_ledgers_restored()
        # A crashed starter has nothing to restart: the others carry on.

    def _count_service_faults(self) -> None:
        """Add the services' fault counters per operation, their per-second times and their
        latency faults' delays to the run's (they restart with the process), and keep what
        each ledger held, for `_check_ledgers_restored`."""
        with contextlib.suppress(OSError, ValueError):
            stats = self.services.stats()
            for name, counts in stats.items():
                service = SERVICES[name]
                for operation, as_agent in ((service.action, DO), (service.compensation, UNDO)):
                    self.service_faults[name][as_agent].update(
                        counts["faults_injected_by_operation"][operation]
                    )
                    self.service_latencies[name][as_agent] += counts["latency_delays"].get(
                        operation, []
                    )
                self.service_fault_events += [
                    {
                        "t": round(float(timed["at"]) - self.started_wall, 2),
                        "kind": f"service-{timed['kind']}",
                        "service": name,
                        "count": int(timed["count"]),
                    }
                    for timed in counts.get("faults_injected_times", [])
                ]
            self._stats_before_kill = stats

    def _check_ledgers_restored(self) -> None:
        """A restarted services process holds at least the side effects its ledgers held just
        before the kill (read back from the journal: E7, C8); else it forgot idempotency keys."""
        before, self._stats_before_kill = self._stats_before_kill, {}
        try:
            after = self.services.stats()
        except (OSError, ValueError) as error:
            self.ledgers_forgotten.append(f"restarted services did not answer: {error}")
            return
        self.ledgers_forgotten += forgotten_side_effects(before, after)

    # -- watching -----------------------------------------------------------------------

    @property
    def _settings(self) -> Settings:
        return Settings.from_environ(self.values)

    def _records(self, order_ids: Sequence[str]) -> dict[str, StateRecord | None]:
        return {order_id: self.states.get(order_id) for order_id in order_ids}

    def _total(self, fetch: Callable[[int, str | None], Page[StateRecord]]) -> int:
        """The records of every page of one query, counted."""
        total, continuation = 0, None
        while True:
            page = fetch(self.states.max_page_size, continuation)
            total += len(page.items)
            continuation = page.continuation
            if continuation is None:
                return total

    def _count(self, states: Sequence[ProcessState]) -> int:
        def in_state(state: ProcessState) -> int:
            return self._total(
                lambda size, token: self.states.query_by_state(
                    state=state, page_size=size, continuation=token
                )
            )

        return sum(in_state(state) for state in states)

    async def sample(self) -> dict[str, float]:
        in_flight = await asyncio.to_thread(self._count, UNFINISHED)
        finished = await asyncio.to_thread(
            self._count, [s for s in ProcessState if s.value in FINAL_STATES]
        )
        point = {
            "t": round(self.now(), 2),
            "submitted": float(self.submitted),
            "in_flight": float(in_flight),
            "finished": float(finished),
        }
        self.series.append(point)
        return point

    async def watch(self, done: asyncio.Event) -> None:
        while not done.is_set():
            point = await self.sample()
            self.progress.show(
                f"{point['t']:7.1f} s  submitted {int(point['submitted'])}  in flight "
                f"{int(point['in_flight'])}  finished {int(point['finished'])}"
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), SAMPLE_SECONDS)

    def _owing(self) -> int:
        """Records whose outbox still owes messages (C6), which the supervisor's sweep relays
        once OUTBOX_GRACE_SECONDS have passed: a final state whose status is not out yet."""
        until = datetime.now(UTC) + timedelta(days=1)
        return self._total(
            lambda size, token: self.states.query_owed(
                until=until, page_size=size, continuation=token
            )
        )

    async def settle(self) -> None:
        deadline = time.monotonic() + self.options.settle_seconds
        quiet_since = time.monotonic()
        last: tuple[float, float] | None = None
        while time.monotonic() < deadline:
            point = self.series[-1] if self.series else None
            if point is not None:
                state = (point["in_flight"], point["finished"])
                settled = point["in_flight"] == 0 and await asyncio.to_thread(self._owing) == 0
                if settled and point["finished"] >= self.options.orders:
                    return
                if state != last:
                    last, quiet_since = state, time.monotonic()
                elif settled and time.monotonic() - quiet_since > QUIET_SECONDS:
                    return
            await asyncio.sleep(SAMPLE_SECONDS)

    async def run(self) -> ChaosReport:
        window = max(self.options.orders / self.options.rate, MIN_CRASH_WINDOW_SECONDS)
        schedule = crash_schedule(self.options.seed, window, self.options.crashes)
        await self.start()
        self.states, self.orders = bootstrap.open_stores(
            self._settings, StoreMetrics(), environ=self.values
        )
        try:
            self.started = time.monotonic()
            self.started_wall = time.time()
            done = asyncio.Event()
            watcher = asyncio.create_task(self.watch(done))
            relaying = asyncio.Event()
            relay = asyncio.create_task(self.relay.run(relaying))
            try:
                await asyncio.gather(self.submit(), self.crash(schedule))
                await self.settle()
            finally:
                done.set()
                relaying.set()
                await asyncio.gather(watcher, relay)
                await self.relay.drain()
            duration = self.now()
            await self.sample()
            self._count_service_faults()
            await self.stop_hosts()
            await asyncio.to_thread(self.services.stop)
            self.progress.end()
            return await self._report(duration)
        finally:
            self.states.close()
            self.orders.close()

    async def _report(self, duration: float) -> ChaosReport:
        settings = self._settings
        records = await asyncio.to_thread(self._records, self.workload.order_ids)
        replies, alerts, dead_letters = await _queues(self.broker.connection_string, settings)
        finished = _finished_at(replies)
        for event in self.crashes:
            event.recover(finished)
        histories = await asyncio.to_thread(
            cost.orchestration_histories, [self.work_dir / role for role in self.hosts]
        )
        findings = check(
            records,
            self.workload,
            self.services.ledger,
            replies=replies,
            alerts=alerts,
            dead_letters=dead_letters,
            max_failures=settings.max_failures,
            steps=settings.order_steps,
            ledgers_forgotten=self.ledgers_forgotten,
            histories=histories,
        )
        return ChaosReport(
            orders=self.options.orders,
            seed=self.options.seed,
            submitted={
                kind: self.workload.count(kind)
                for kind in ("order", "resend", "conflict", "malformed")
            },
            final_states=dict(
                Counter(r.process_state.value for r in records.values() if r is not None)
            ),
            findings=findings,
            crashes=self.crashes,
            service_faults={
                name: {operation: dict(c) for operation, c in by_operation.items()}
                for name, by_operation in self.service_faults.items()
            },
            service_latencies=self.service_latencies,
            deadlines={
                DO: settings.timeouts.step_seconds,
                UNDO: settings.timeouts.compensation_seconds,
            },
            series=self.series,
            relay=dict(self.relay.counts),
            relay_events=[
                {
                    "t": e.t,
                    "kind": f"agent-response-{e.kind}",
                    "messageId": e.message_id,
                    "operation": e.operation,
                    **({} if e.held_seconds is None else {"heldSeconds": e.held_seconds}),
                }
                for e in self.relay.events
            ],
            service_fault_events=self.service_fault_events,
            claims_abandoned=self.claims_abandoned,
            duration_seconds=duration,
            cost=cost.section(
                cost.RunCounts(
                    orders=self.options.orders,
                    history=cost.HistoryCounts.of(histories.values()),
                    unmeasured=UNMEASURED,
                )
            ),
            settings={
                "rate": self.options.rate,
                "settle_seconds": self.options.settle_seconds,
                "crashes": {kind.value: n for kind, n in self.options.crashes.items()},
                "second_scheduler": self.options.second_scheduler,
                "fault_plans": {name: p.to_json() for name, p in self.plans.items()},
                "scripted_compensations": {} if self.script is None else self.script.to_json(),
                "state_store": settings.state_store,
                "order_steps": list(settings.order_steps),
                "step_timeout_seconds": settings.timeouts.step_seconds,
                "compensation_timeout_seconds": settings.timeouts.compensation_seconds,
                "max_failures": settings.max_failures,
            },
        )


async def _queues(
    connection_string: str, settings: Settings
) -> tuple[list[QueueMessage], list[QueueMessage], list[QueueMessage]]:
    """Every status on the reply queue, every operator alert, the orders' dead letters."""
    async with ServiceBusClient.from_connection_string(connection_string) as client:
        replies, alerts, dead = await asyncio.gather(
            peek_all(client.get_queue_receiver(DEMO_REPLY_QUEUE)),
            peek_all(client.get_queue_receiver(settings.operator_alerts_queue)),
            peek_all(
                client.get_queue_receiver(
                    settings.orders_queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER
                )
            ),
        )
    return (
        [_message(m) for m in replies],
        [_message(m) for m in alerts],
        [_message(m) for m in dead],
    )


def _finished_at(replies: Sequence[QueueMessage]) -> list[datetime]:
    """When each final status was written, from the status messages' ``at``."""
    finals = {status.value for status in FINAL_STATUS.values()}
    moments = []
    for reply in replies:
        if reply.body.get("status") in finals:
            with contextlib.suppress(TypeError, ValueError):
                moments.append(parse_utc(str(reply.body["at"])))
    return moments


def _message(message: ServiceBusReceivedMessage) -> QueueMessage:
    try:
        body = json.loads(b"".join(message.body))
    except ValueError:
        body = None
    return QueueMessage(
        message.message_id,
        body if isinstance(body, dict) else {},
        message.dead_letter_reason,
    )


async def run_chaos(options: ChaosOptions) -> ChaosReport:
    with tempfile.TemporaryDirectory(prefix="chaos-") as scratch:
        work_dir = options.work_dir or Path(scratch)
        await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
        # Started before the run's tasks and stopped after them: its blocking start and stop
        # hold none of them up.
        with local_store_settings(options.backend) as store_settings:
            run = Run(options, work_dir, store_settings)
            try:
                return await run.run()
            finally:
                await run.stop()


def write_report(report: ChaosReport, path: Path | None) -> None:
    print(report.render())
    if path is not None:
        path.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
        print(f"Report written to {path}")
