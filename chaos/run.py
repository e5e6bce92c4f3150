"""``python -m devhost chaos``: the order pipeline under faults and crashes, then the proof.

Each piece runs as a process of its own, so each can be killed with SIGKILL mid-order and
started again on the same files and port: the embedded broker with its ``--data`` journal,
the simulated services with their ledger journal and the chaos fault mix
(`chaos.schedule.chaos_plans`), and three devhosts (``python -m devhost start``, one language
worker each; `chaos.topology`) on the embedded default (SQLite stores), each with its
orchestration histories in the work directory. This process submits the workload (the
demo's: valid orders, exact resends, conflicting copies, malformed messages) at a steady
rate, resending a batch the broker did not take (ids are stable, resends are idempotent: S2,
C6), relays the agents' answers (`chaos.relay`), and follows the seeded crash schedule: it
kills and restarts the devhosts, the broker and the services (C10) and plays a starter that
dies between claim and start (D3, U4). It samples the state store every ``SAMPLE_SECONDS``
(the time series of submitted, in-flight and finished orders) and, once every order is final
or the settle time has passed, stops the devhosts and the services and checks the invariants
(`chaos.invariants`) on the ledgers, the state store and the queues.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient

import bootstrap
from chaos.invariants import FINAL_STATUS, Findings, QueueMessage, check
from chaos.processes import HostProcess, ServicesProcess
from chaos.relay import ResponseRelay
from chaos.schedule import Crash, CrashKind, chaos_plans, crash_schedule
from chaos.topology import AGENT_RESPONSES_RELAYED, broker_config, host_settings
from config import Settings
from demo.client import Outgoing, Workload
from demo.pipeline import (
    BROKER_CONFIG,
    DEMO_REPLY_QUEUE,
    LOCAL_SETTINGS,
    REPOSITORY,
    sample_settings,
)
from demo.report import FINAL_STATES, percentile
from demo.run import peek_all
from devhost.servicebus.process import BrokerProcess
from domain.ports import StoreMetrics
from domain.records import ProcessState, StateRecord, parse_utc
from services.starter import claim_pending
from simulators.services import SERVICES

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
# Step and claim deadlines as the demo's; compensations get as long as a step (C2).
CHAOS_SETTINGS: dict[str, str] = {
    "STATE_STORE": "sqlite",
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
    service_faults: dict[str, dict[str, int]]
    series: list[dict[str, float]]
    relay: dict[str, int]
    """Agent responses lost, duplicated, late, reordered (`chaos.relay`)."""
    relay_events: list[dict[str, Any]]
    claims_abandoned: list[str]
    """Instance ids claimed by a starter that died before starting them."""
    duration_seconds: float
    settings: dict[str, Any]
    service_fault_events: list[dict[str, Any]] = field(default_factory=list)
    """The services' faults per second, kind and service: ``{"t", "kind": "service-<kind>",
    "service", "count"}`` (`ChaosRun._count_service_faults`)."""

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

    def faults_by_kind(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for by_kind in self.service_faults.values():
            total.update(by_kind)
        total.update(Counter(c.kind for c in self.crashes))
        total.update({f"agent-response-{kind}": n for kind, n in self.relay.items()})
        return dict(sorted(total.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "orders": self.orders,
            "seed": self.seed,
            "submitted": self.submitted,
            "final_states": self.final_states,
            "rejected": len(self.findings.rejected),
            "invariants": self.findings.to_json(),
            "broken_invariants": self.findings.broken,
            "faults_injected": self.faults_by_kind(),
            "service_faults": self.service_faults,
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
            "result": "failed" if self.failed else "passed",
        }

    def render(self) -> str:
        recovery = self.recovery()
        lines = [
            f"Orders: {self.orders} (seed {self.seed}), submitted as {self.submitted}",
            f"Final states: {_pairs(self.final_states)}; rejected at the backlog bound: "
            f"{len(self.findings.rejected)}",
            f"Faults injected: {_pairs(self.faults_by_kind())}",
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
            "Invariants:",
        ]
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

    def __init__(self, options: ChaosOptions, work_dir: Path) -> None:
        self.options = options
        self.work_dir = work_dir
        self.workload = Workload.generate(options.orders, options.seed)
        self.log = (work_dir / "processes.log").open("a", encoding="utf-8")
        self.broker = BrokerProcess(
            broker_config(BROKER_CONFIG, work_dir / "servicebus.config.json"),
            data=work_dir / "servicebus.sqlite",
        )
        self.services = ServicesProcess(
            work_dir / "ledger.jsonl", chaos_plans(), options.seed, self.log
        )
        self.hosts: dict[str, HostProcess] = {}
        self.relay = ResponseRelay(
            lambda: self.broker.connection_string,
            AGENT_RESPONSES_RELAYED,
            "agent-responses",  # the scheduler's queue: AGENT_RESPONSES_QUEUE, set at start
            options.seed,
            self.now,
        )
        self.claims_abandoned: list[str] = []
        self.ledgers_forgotten: list[str] = []
        self._ledger_sizes: dict[str, int] = {}
        self.values: dict[str, str] = {}
        self.started = 0.0
        self.started_wall = 0.0
        self.service_fault_events: list[dict[str, Any]] = []
        self.submitted = 0
        self.series: list[dict[str, float]] = []
        self.crashes: list[CrashEvent] = []
        self.service_faults: dict[str, Counter[str]] = {name: Counter() for name in SERVICES}

    def now(self) -> float:
        return time.monotonic() - self.started

    async def start(self) -> None:
        await asyncio.to_thread(self.broker.start)
        await asyncio.to_thread(self.services.start)
        self.values = {
            **sample_settings(),
            **LOCAL_SETTINGS,
            **CHAOS_SETTINGS,
            "ServiceBusConnection": self.broker.connection_string,
            "FULFILMENT_SERVICE_URL": self.services.base_url,
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
            if self.options.progress:
                print(
                    f"\n{planned.kind.value} at {event.at:.1f} s, restarted at "
                    f"{event.restarted_at:.1f} s",
                    file=sys.stderr,
                    flush=True,
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
        """Add the services' fault counters and their per-second times to the run's (they
        restart with the process), and keep how many side effects each ledger held, for
        `_check_ledgers_restored`."""
        with contextlib.suppress(OSError, ValueError):
            stats = self.services.stats()
            for name, counts in stats.items():
                self.service_faults[name].update(counts["faults_injected"])
                self.service_fault_events += [
                    {
                        "t": round(float(timed["at"]) - self.started_wall, 2),
                        "kind": f"service-{timed['kind']}",
                        "service": name,
                        "count": int(timed["count"]),
                    }
                    for timed in counts.get("faults_injected_times", [])
                ]
            self._ledger_sizes = {name: _side_effects(counts) for name, counts in stats.items()}

    def _check_ledgers_restored(self) -> None:
        """A restarted services process holds at least the side effects its ledgers held just
        before the kill (read back from the journal: E7, C8); else it forgot idempotency keys."""
        before, self._ledger_sizes = self._ledger_sizes, {}
        try:
            after = {name: _side_effects(c) for name, c in self.services.stats().items()}
        except (OSError, ValueError) as error:
            self.ledgers_forgotten.append(f"restarted services did not answer: {error}")
            return
        self.ledgers_forgotten += [
            f"{name}: {before[name]} side effects before the kill, {after.get(name, 0)} after"
            for name in sorted(before)
            if after.get(name, 0) < before[name]
        ]

    # -- watching -----------------------------------------------------------------------

    @property
    def _settings(self) -> Settings:
        return Settings.from_environ(self.values)

    def _records(self, order_ids: Sequence[str]) -> dict[str, StateRecord | None]:
        return {order_id: self.states.get(order_id) for order_id in order_ids}

    def _count(self, states: Sequence[ProcessState]) -> int:
        total = 0
        for state in states:
            continuation = None
            while True:
                page = self.states.query_by_state(
                    state=state, page_size=self.states.max_page_size, continuation=continuation
                )
                total += len(page.items)
                continuation = page.continuation
                if continuation is None:
                    break
        return total

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
            if self.options.progress:
                print(
                    f"\r{point['t']:7.1f} s  submitted {int(point['submitted'])}  in flight "
                    f"{int(point['in_flight'])}  finished {int(point['finished'])}   ",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), SAMPLE_SECONDS)

    async def settle(self) -> None:
        deadline = time.monotonic() + self.options.settle_seconds
        quiet_since = time.monotonic()
        last: tuple[float, float] | None = None
        while time.monotonic() < deadline:
            point = self.series[-1] if self.series else None
            if point is not None:
                state = (point["in_flight"], point["finished"])
                if point["in_flight"] == 0 and point["finished"] >= self.options.orders:
                    return
                if state != last:
                    last, quiet_since = state, time.monotonic()
                elif point["in_flight"] == 0 and time.monotonic() - quiet_since > QUIET_SECONDS:
                    return
            await asyncio.sleep(SAMPLE_SECONDS)

    async def run(self) -> ChaosReport:
        window = max(self.options.orders / self.options.rate, MIN_CRASH_WINDOW_SECONDS)
        schedule = crash_schedule(self.options.seed, window, self.options.crashes)
        await self.start()
        self.states, self.orders = bootstrap.open_stores(self._settings, StoreMetrics())
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
            if self.options.progress:
                print(file=sys.stderr)
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
        findings = check(
            records,
            self.workload,
            self.services.ledger,
            replies=replies,
            alerts=alerts,
            dead_letters=dead_letters,
            max_failures=settings.max_failures,
            steps=settings.order_steps,
        )
        findings.invariants["ledgers_survive_restart"] = self.ledgers_forgotten
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
            service_faults={name: dict(c) for name, c in self.service_faults.items()},
            series=self.series,
            relay=dict(self.relay.counts),
            relay_events=[
                {"t": e.t, "kind": f"agent-response-{e.kind}", "messageId": e.message_id}
                for e in self.relay.events
            ],
            service_fault_events=self.service_fault_events,
            claims_abandoned=self.claims_abandoned,
            duration_seconds=duration,
            settings={
                "rate": self.options.rate,
                "settle_seconds": self.options.settle_seconds,
                "crashes": {kind.value: n for kind, n in self.options.crashes.items()},
                "second_scheduler": self.options.second_scheduler,
                "fault_plans": {name: p.to_json() for name, p in chaos_plans().items()},
                "state_store": settings.state_store,
                "order_steps": list(settings.order_steps),
                "step_timeout_seconds": self.values["STEP_TIMEOUT_SECONDS"],
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


def _side_effects(stats: Mapping[str, Any]) -> int:
    """Actions plus compensations a service's ``GET /stats`` counts in its ledger."""
    per_order = stats.get("side_effects_per_order", {})
    return sum(sum(counts.values()) for counts in per_order.values())


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
        run = Run(options, work_dir)
        try:
            return await run.run()
        finally:
            await run.stop()


def write_report(report: ChaosReport, path: Path | None) -> None:
    print(report.render())
    if path is not None:
        path.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
        print(f"Report written to {path}")
