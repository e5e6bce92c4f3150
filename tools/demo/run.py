"""``python -m tools.demo``: the order pipeline under load and faults, with a report.

Starts the embedded broker, the simulated remote services (stock, payment, shipping) with the
chosen fault mix (`demo.showcase`: a preset plus, except under ``none``, scripted paths for a
few orders) and the devhost running the app; the demo client, a process of its own as a
client app would be (``demo.client_process``), submits the orders and listens on its reply
queue while a progress bar shows how many have finished. When every order has reached a final
status, or the settle time has passed, the report is built from the stores, the dead-letter
and alert queues, the services' ledgers and what the client received (``demo.evidence``,
``demo.report``). While it runs, the broker's active message counts are sampled every
``LAG_SAMPLE_SECONDS``: the report's consumer lag per queue (largest and final). With a
telemetry file, the report's ``metrics`` section is read from it once every process has
flushed its metrics at shutdown (``demo.metrics``).

With ``work_dir`` the run's data outlives it there: the SQLite stores, the devhost's data, the
broker's journal and the settings the run used (``demo.console`` serves the operator
console over them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from azure.servicebus import ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver
from devhost.telemetry import CONSOLE, EXPORT_SETTING

import bootstrap
from domain.ports import StoreMetrics
from domain.records import StateRecord
from tools import cost
from tools.console_keys import local_keys
from tools.demo import metrics
from tools.demo.client import Workload
from tools.demo.client_process import ClientOutcome, ClientProcess, ClientSpec
from tools.demo.console import BROKER_JOURNAL, console_url, keep_settings
from tools.demo.evidence import ServiceLedger, gather
from tools.demo.pipeline import DEMO_REPLY_QUEUE, HOST_DATA_DIR, Pipeline, local_pipeline
from tools.demo.progress import ProgressLine
from tools.demo.report import FINAL_STATES, DemoReport, lost_orders, percentile
from tools.demo.showcase import STEP_SERVICES, FaultMix, fault_mix
from tools.simulators.services import FaultKind

PEEK_TIMEOUT_SECONDS = 30.0
POLL_SECONDS = 0.2
LAG_SAMPLE_SECONDS = 1.0
# Every compensation step gets this deadline (C2): short, like STEP_TIMEOUT_SECONDS of the
# local settings, so a stalled compensation is resumed within the run's settle time.
# The dead-letter watcher runs every two seconds, so the dead letters of a short run are
# alerted and counted (sas.deadletters) before it ends.
DEMO_SETTINGS: dict[str, str] = {
    "COMPENSATION_TIMEOUT_SECONDS": "10",
    "DEADLETTER_WATCH_SCHEDULE": "*/2 * * * * *",
}
# Answers after which the agent tries again, while its deadline allows (E9).
RETRIED_FAULTS = (FaultKind.TRANSIENT.value, FaultKind.LOST_RESPONSE.value)


@dataclass(frozen=True)
class DemoOptions:
    orders: int = 200
    faults: str = "default"
    seed: int = 1
    report_path: Path | None = None
    work_dir: Path | None = None
    settle_seconds: float = 120.0
    progress: bool = True
    settings: Mapping[str, str] = field(default_factory=dict)
    """App settings over the local defaults and the environment (e.g. STATE_STORE)."""
    worker_processes: int = 1
    """Language worker processes that run the function code (0: in the demo's own process)."""
    broker_process: bool = True
    """Run the embedded broker as a child process (False: a thread of the demo's own)."""
    telemetry_export: str | None = None
    """Where the devhost, its workers, the simulated services and the client export traces
    and metrics as OTLP JSON lines (a file, started afresh, or ``console``; C9)."""


async def run_demo(options: DemoOptions) -> DemoReport:
    workload = Workload.generate(options.orders, options.seed)
    mix = fault_mix(options.faults, workload.order_ids, options.seed)
    telemetry_settings: dict[str, str] = {}
    if options.telemetry_export is not None:
        if options.telemetry_export != CONSOLE:
            await asyncio.to_thread(Path(options.telemetry_export).unlink, missing_ok=True)
        telemetry_settings[EXPORT_SETTING] = options.telemetry_export
    with tempfile.TemporaryDirectory(prefix="demo-") as scratch:
        work_dir = options.work_dir or Path(scratch)
        async with local_pipeline(
            work_dir,
            service_faults=mix.services,
            seed=options.seed,
            settings={**DEMO_SETTINGS, **options.settings, **telemetry_settings},
            worker_processes=options.worker_processes,
            broker_process=options.broker_process,
            broker_data=None if options.work_dir is None else work_dir / BROKER_JOURNAL,
        ) as pipeline:
            if options.work_dir is not None:
                await asyncio.to_thread(keep_settings, work_dir, pipeline.host.settings.values)
            report = await _run(pipeline, workload, mix, options)
        # Read once the host stopped: the histories of every orchestration the run started.
        histories = await asyncio.to_thread(
            cost.orchestration_histories, [work_dir / HOST_DATA_DIR]
        )
    if report.run_counts is not None:
        report.run_counts = dataclasses.replace(
            report.run_counts, history=cost.HistoryCounts.of(histories.values())
        )
        report.cost = cost.section(report.run_counts)
    # Every process flushed its last metrics when the pipeline stopped.
    if options.telemetry_export not in (None, CONSOLE):
        run_metrics = await asyncio.to_thread(metrics.read, Path(options.telemetry_export))
        report.metrics = metrics.section(run_metrics)
    return report


async def _run(
    pipeline: Pipeline, workload: Workload, mix: FaultMix, options: DemoOptions
) -> DemoReport:
    host = pipeline.host
    if host.http is not None and host.keys is not None:
        act_key = local_keys(host.options.data_dir).act
        print(
            "operator console, while the demo runs: "
            f"{console_url(host.http.port, host.keys.function, act_key)}",
            file=sys.stderr,
            flush=True,
        )
    lag = ConsumerLag()
    sampler = asyncio.create_task(lag.sample_every(pipeline, LAG_SAMPLE_SECONDS))
    try:
        outcome, (start, end) = await _submit_and_settle(pipeline, workload, options)
    finally:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    await lag.sample(pipeline)
    report = await _report(pipeline, workload, outcome, end - start, mix, options)
    report.consumer_lag = lag.summary()
    report.measured_window = {"start": start, "end": end}
    return report


class ConsumerLag:
    """The broker's active message counts per queue over the run: the largest and the last
    (the embedded broker's stand-in for Service Bus's ActiveMessages metric)."""

    def __init__(self) -> None:
        self.largest: Counter[str] = Counter()
        self.last: dict[str, int] = {}

    async def sample(self, pipeline: Pipeline) -> None:
        counts = await pipeline.active_counts()
        for queue, count in counts.items():
            self.largest[queue] = max(self.largest[queue], count)
        self.last = counts

    async def sample_every(self, pipeline: Pipeline, seconds: float) -> None:
        while True:
            await self.sample(pipeline)
            await asyncio.sleep(seconds)

    def summary(self) -> dict[str, dict[str, int]]:
        return {
            queue: {"max": self.largest[queue], "final": self.last.get(queue, 0)}
            for queue in sorted(self.largest)
        }


async def _submit_and_settle(
    pipeline: Pipeline, workload: Workload, options: DemoOptions
) -> tuple[ClientOutcome, tuple[float, float]]:
    settings = bootstrap.services().settings
    client = ClientProcess(
        ClientSpec(
            pipeline.connection_string,
            settings.orders_queue,
            DEMO_REPLY_QUEUE,
            options.orders,
            options.seed,
            options.telemetry_export,
        )
    )
    total = len(workload.order_ids)
    line = ProgressLine(enabled=options.progress)
    progress = asyncio.create_task(_progress(client, total, line))
    try:
        await client.start()
        while not client.submitted.is_set():
            client.check()
            await asyncio.sleep(POLL_SECONDS)
        deadline = time.monotonic() + options.settle_seconds
        while time.monotonic() < deadline and client.finished < total:
            client.check()
            await asyncio.sleep(POLL_SECONDS)
        stopped = time.monotonic()
        outcome = await client.stop()
    finally:
        progress.cancel()
        await asyncio.gather(progress, return_exceptions=True)
        await client.close()
    line.end()
    # First submission to last order finished (the client's times; one clock for every
    # process), not to this loop's next look.
    finished = outcome.log.finished_at.values()
    ended = max(finished) if len(finished) >= total else stopped
    return outcome, (outcome.started, ended)


async def _progress(client: ClientProcess, total: int, line: ProgressLine) -> None:
    width = 40
    while line.enabled:
        finished = client.finished
        filled = width * finished // max(1, total)
        bar = f"[{'#' * filled}{'.' * (width - filled)}] {finished}/{total} finished"
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(client.statuses.items()))
        line.show(f"{bar}  {statuses}" if statuses else bar)
        await asyncio.sleep(0.5)


async def _report(
    pipeline: Pipeline,
    workload: Workload,
    client: ClientOutcome,
    duration: float,
    mix: FaultMix,
    options: DemoOptions,
) -> DemoReport:
    app = bootstrap.services()
    # Reading the final states through the app's own stores would count into the cost per
    # order, so the report reads through stores of its own.
    states, orders = bootstrap.open_stores(app.settings, StoreMetrics())
    try:
        records = {order_id: states.get(order_id) for order_id in workload.order_ids}
    finally:
        states.close()
        orders.close()
    final_states = Counter(r.process_state.value for r in records.values() if r is not None)
    lost = lost_orders(records, client.log.rejected)
    stuck = sorted(
        order_id
        for order_id, record in records.items()
        if record is not None and record.process_state.value not in FINAL_STATES
    )
    services = pipeline.services
    stats = {service: services.stats(service) for service in STEP_SERVICES}
    evidence = gather(
        records,
        [ServiceLedger(service, services.ledger_entries(service)) for service in STEP_SERVICES],
        max_failures=app.settings.max_failures,
        steps=app.settings.order_steps,
    )
    usage = await pipeline.app_usage()
    store = usage.store
    messages = client.sent + sum(usage.messages_sent.values())
    # Each message sent to a queue the app consumes runs one execution of its trigger.
    triggered = client.sent + sum(
        usage.messages_sent.get(queue, 0) for queue in app.settings.consumed_queues
    )
    valid = max(1, len(workload.order_ids))
    latencies = client.log.latencies_ms()
    reasons, alerts = await _queues(pipeline.connection_string)
    return DemoReport(
        orders=len(workload.order_ids),
        final_states=dict(final_states),
        lost=lost,
        rejected=sorted(client.log.rejected),
        stuck=stuck,
        dead_lettered=sum(sum(by_reason.values()) for by_reason in reasons.values()),
        dead_letter_reasons=reasons,
        status_messages=dict(client.log.statuses),
        in_progress_by_step=dict(client.log.steps),
        operator_alerts=alerts,
        double_side_effects={
            service: int(stats[service]["double_side_effects"]) for service in STEP_SERVICES
        },
        stale_writes_refused={
            **{service: int(stats[service]["stale_writes_refused"]) for service in STEP_SERVICES},
            "state_store": store.refused,
        },
        actions_refused_after_undo=sum(
            int(stats[service]["actions_refused_after_undo"]) for service in STEP_SERVICES
        ),
        agent_retries=sum(
            int(stats[service]["faults_injected"][kind])
            for service in STEP_SERVICES
            for kind in RETRIED_FAULTS
        ),
        compensations=evidence.compensations,
        net_effects=evidence.net_effects,
        net_effect_orders=evidence.net_effect_orders,
        steps_after_compensation=evidence.steps_after_compensation,
        compensation_began=evidence.compensation_began,
        latency_ms={"p50": percentile(latencies, 0.5), "p95": percentile(latencies, 0.95)},
        step_latency_ms=evidence.step_latency_ms,
        start_latency_ms=evidence.start_latency_ms,
        per_order={
            "store_reads": round(store.reads / valid, 2),
            "store_writes": round(store.writes / valid, 2),
            "messages": round(messages / valid, 2),
            "request_charge": round(store.request_charge / valid, 2),
        },
        run_counts=cost.RunCounts(
            orders=len(workload.order_ids),
            history=cost.HistoryCounts(),
            store_reads=store.reads,
            store_writes=store.writes,
            messages_sent=messages,
            triggered=triggered,
            request_units=store.request_charge or None,
        ),
        supervisor=evidence.supervisor,
        scripted_paths=[
            {
                "orderId": order_id,
                "path": path.path,
                "expected": path.expected,
                "reached": _state_of(records.get(order_id)),
            }
            for order_id, path in sorted(mix.scripted.items())
        ],
        submitted={
            kind: workload.count(kind) for kind in ("order", "resend", "conflict", "malformed")
        },
        duration_seconds=round(duration, 2),
        settings={
            "faults": options.faults,
            "seed": options.seed,
            "state_store": app.settings.state_store,
            "order_steps": list(app.settings.order_steps),
            "agent_transport": app.settings.agent_transport,
            "max_failures": app.settings.max_failures,
        },
    )


def _state_of(record: StateRecord | None) -> str:
    return "lost" if record is None else record.process_state.value


async def _queues(connection_string: str) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Dead letters by queue and reason, and the operator alerts by kind."""
    settings = bootstrap.services().settings
    queues = (*settings.consumed_queues, settings.operator_alerts_queue, DEMO_REPLY_QUEUE)
    async with ServiceBusClient.from_connection_string(connection_string) as client:
        # Opening a link costs a round of handshakes: peek every queue at once.
        counted, alerts = await asyncio.gather(
            asyncio.gather(*(_reasons_on(client, queue) for queue in queues)),
            _alert_kinds(client, settings.operator_alerts_queue),
        )
    reasons = {queue: found for queue, found in zip(queues, counted, strict=True) if found}
    return reasons, alerts


async def _alert_kinds(client: ServiceBusClient, queue: str) -> dict[str, int]:
    kinds: Counter[str] = Counter()
    for message in await peek_all(client.get_queue_receiver(queue)):
        try:
            kinds[str(json.loads(b"".join(message.body))["kind"])] += 1
        except (ValueError, KeyError, TypeError):
            kinds["unreadable"] += 1
    return dict(kinds)


async def _reasons_on(client: ServiceBusClient, queue: str) -> dict[str, int]:
    receiver = client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
    found = await peek_all(receiver)
    return dict(Counter(message.dead_letter_reason or "unspecified" for message in found))


async def peek_all(receiver: ServiceBusReceiver) -> list[ServiceBusReceivedMessage]:
    messages: list[ServiceBusReceivedMessage] = []
    async with receiver:
        sequence = 0
        while True:
            batch = await receiver.peek_messages(
                max_message_count=250, sequence_number=sequence, timeout=PEEK_TIMEOUT_SECONDS
            )
            if not batch:
                return messages
            messages += batch
            sequence = (batch[-1].sequence_number or 0) + 1


def write_report(report: DemoReport, path: Path | None) -> None:
    print(report.render())
    if path is not None:
        path.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
        print(f"Report written to {path}")
