"""Benchmark: send + receive + complete throughput of the embedded Service Bus broker.

Each run starts the broker as its own process through the CLI (`python -m devhost
servicebus`, ephemeral port, a temporary Config.json with one queue), then the real
azure-servicebus SDK in separate client processes: one sender sending 1 KB messages in
batches, and competing peek-lock receivers with prefetch that complete every message.
The clock starts when every client has its link open and stops at the last completion;
throughput is messages / that time. Every run gets a fresh broker (and a fresh journal),
so runs are independent; the broker is stopped whatever happens.

Both ways the broker can run are measured: in memory, and with `--data` (the SQLite
journal that keeps messages durable). The goal is 2,000 msgs/s on 2 cores.

    python -m tools.bench.servicebus_throughput [--messages 10000] [--runs 5] [--receivers 2]
                                          [--journal both|memory|sqlite]

Not a test: it asserts nothing about speed and is not collected by pytest. It exits 1 only
when a run goes wrong (the broker does not start, a client fails, a message is missing).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import IO

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from tools.bench.figures import REPO_ROOT, Spread, machine, markdown_table, verdict

GOAL_MSGS_PER_SECOND = 2_000
QUEUE_NAME = "bench"
MESSAGE_BYTES = 1024
SEND_BATCH = 100
RECEIVE_BATCH = 100
PREFETCH = 300
# Every SDK call is bounded: a broker that stops answering must fail the run, not hang it.
SDK_TIMEOUT_SECONDS = 30.0
RECEIVE_WAIT_SECONDS = 1.0
BROKER_START_SECONDS = 30.0
CLIENT_START_SECONDS = 60.0
BROKER_STOP_SECONDS = 10.0
# A run that moves fewer than this many messages a second has failed rather than been slow.
SLOWEST_CREDIBLE_MSGS_PER_SECOND = 50

JOURNALS = {"memory": False, "sqlite": True}
READY = "ready"
DONE = "done"


class BenchError(RuntimeError):
    """A run could not be measured; the message says which part failed and why."""


@dataclass(frozen=True)
class ClientReport:
    """What a client process tells the runner: ready (link open), or done (or failed)."""

    role: str
    stage: str
    messages: int = 0
    finished_at: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class RunResult:
    seconds: float
    send_seconds: float
    messages: int

    @property
    def msgs_per_second(self) -> float:
        return self.messages / self.seconds


def broker_config() -> dict[str, object]:
    queue_settings = {"Name": QUEUE_NAME, "Properties": {"LockDuration": "PT1M"}}
    return {"UserConfig": {"Namespaces": [{"Name": "bench", "Queues": [queue_settings]}]}}


@contextmanager
def broker_process(work_dir: Path, journal: bool) -> Iterator[str]:
    """Run the broker through its CLI; yield its connection string; always stop it."""
    config_path = work_dir / "Config.json"
    config_path.write_text(json.dumps(broker_config()), encoding="utf-8")
    command = [sys.executable, "-m", "devhost", "--log-level", "WARNING", "servicebus"]
    command += ["--config", str(config_path), "--port", "0"]
    if journal:
        command += ["--data", str(work_dir / "journal.sqlite")]
    log_path = work_dir / "broker.log"
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert process.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        # A reader thread, so waiting for the broker's banner is bounded even if it never comes.
        reader = threading.Thread(target=_forward_lines, args=(process.stdout, lines), daemon=True)
        reader.start()
        try:
            yield _connection_string(process, lines, log_path)
        finally:
            _stop(process)
            reader.join(timeout=BROKER_STOP_SECONDS)
            process.stdout.close()


def _connection_string(
    process: subprocess.Popen[str], lines: queue.Queue[str], log_path: Path
) -> str:
    deadline = time.monotonic() + BROKER_START_SECONDS
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2).strip()
        except queue.Empty:
            if process.poll() is not None:
                break
            continue
        if line.startswith("Endpoint="):
            return line
    exit_code = process.poll()
    what = (
        f"did not print its connection string within {BROKER_START_SECONDS:.0f} s"
        if exit_code is None
        else f"exited with code {exit_code} before printing its connection string"
    )
    raise BenchError(f"the broker {what}; its log says:\n{log_path.read_text(encoding='utf-8')}")


def _forward_lines(stream: IO[str], lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)


def _stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(timeout=BROKER_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def send_all(
    connection_string: str,
    messages: int,
    go: Event,
    reports: multiprocessing.Queue[ClientReport],
) -> None:
    """Client process: send ``messages`` 1 KB messages in batches once every client is ready."""
    try:
        body = b"x" * MESSAGE_BYTES
        with (
            ServiceBusClient.from_connection_string(connection_string) as client,
            client.get_queue_sender(QUEUE_NAME) as sender,
        ):
            _ready_then_wait(go, reports, "sender")
            for first in range(0, messages, SEND_BATCH):
                batch = [ServiceBusMessage(body) for _ in range(min(SEND_BATCH, messages - first))]
                sender.send_messages(batch, timeout=SDK_TIMEOUT_SECONDS)
            reports.put(ClientReport("sender", DONE, messages, time.monotonic()))
    except Exception as exc:
        reports.put(ClientReport("sender", DONE, error=f"{type(exc).__name__}: {exc}"))


def receive_all(
    connection_string: str,
    messages: int,
    bound_seconds: float,
    go: Event,
    completed: Synchronized[int],
    reports: multiprocessing.Queue[ClientReport],
) -> None:
    """Client process: receive and complete until all receivers together completed ``messages``."""
    received = 0
    last_completed_at = time.monotonic()
    try:
        with (
            ServiceBusClient.from_connection_string(connection_string) as client,
            client.get_queue_receiver(
                QUEUE_NAME, prefetch_count=PREFETCH, timeout=SDK_TIMEOUT_SECONDS
            ) as receiver,
        ):
            _ready_then_wait(go, reports, "receiver")
            deadline = time.monotonic() + bound_seconds
            while completed.value < messages:
                if time.monotonic() > deadline:
                    raise BenchError(
                        f"{completed.value} of {messages} messages completed "
                        f"in {bound_seconds:.0f} s"
                    )
                batch = receiver.receive_messages(
                    max_message_count=RECEIVE_BATCH, max_wait_time=RECEIVE_WAIT_SECONDS
                )
                for message in batch:
                    receiver.complete_message(message)
                if batch:
                    last_completed_at = time.monotonic()
                    received += len(batch)
                    with completed.get_lock():
                        completed.value += len(batch)
        reports.put(ClientReport("receiver", DONE, received, last_completed_at))
    except Exception as exc:
        reports.put(ClientReport("receiver", DONE, received, error=f"{type(exc).__name__}: {exc}"))


def _ready_then_wait(go: Event, reports: multiprocessing.Queue[ClientReport], role: str) -> None:
    reports.put(ClientReport(role, READY))
    if not go.wait(timeout=CLIENT_START_SECONDS):
        raise BenchError(f"the run did not start within {CLIENT_START_SECONDS:.0f} s")


def measure_run(connection_string: str, messages: int, receivers: int) -> RunResult:
    """One run: a sender and ``receivers`` receivers, each in its own process."""
    context = multiprocessing.get_context("spawn")
    bound = messages / SLOWEST_CREDIBLE_MSGS_PER_SECOND + SDK_TIMEOUT_SECONDS
    go = context.Event()
    completed = context.Value("q", 0)
    reports: multiprocessing.Queue[ClientReport] = context.Queue()
    clients = [context.Process(target=send_all, args=(connection_string, messages, go, reports))]
    clients += [
        context.Process(
            target=receive_all,
            args=(connection_string, messages, bound, go, completed, reports),
        )
        for _ in range(receivers)
    ]
    for client in clients:
        client.start()
    try:
        _collect(reports, clients, READY, CLIENT_START_SECONDS)
        go.set()
        started = time.monotonic()
        done = _collect(reports, clients, DONE, bound + SDK_TIMEOUT_SECONDS)
    except BaseException:
        for client in clients:
            client.kill()
        raise
    finally:
        for client in clients:
            client.join(timeout=SDK_TIMEOUT_SECONDS)
            if client.is_alive():
                client.kill()
                client.join()
    return _result(done, started, messages)


def _collect(
    reports: multiprocessing.Queue[ClientReport],
    clients: Sequence[BaseProcess],
    stage: str,
    seconds: float,
) -> list[ClientReport]:
    """Wait until every client reported ``stage``; fail at the first error, crash or timeout."""
    deadline = time.monotonic() + seconds
    collected: list[ClientReport] = []
    while len(collected) < len(clients):
        try:
            report = reports.get(timeout=0.5)
        except queue.Empty:
            # A client that crashed (rather than reporting an error) would otherwise be
            # waited for until the deadline.
            crashed = [client for client in clients if client.exitcode not in (None, 0)]
            if crashed:
                raise BenchError(
                    "client process died: "
                    + ", ".join(f"{client.name} exit code {client.exitcode}" for client in crashed)
                ) from None
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{len(collected)} of {len(clients)} clients reached {stage!r} "
                    f"within {seconds:.0f} s"
                ) from None
            continue
        if report.error is not None:
            raise BenchError(f"the {report.role} failed: {report.error}")
        if report.stage == stage:
            collected.append(report)
    return collected


def _result(reports: Sequence[ClientReport], started: float, messages: int) -> RunResult:
    completions = [report for report in reports if report.role == "receiver"]
    completed = sum(report.messages for report in completions)
    if completed != messages:
        raise BenchError(f"{messages} messages sent but {completed} completed")
    (sender,) = (report for report in reports if report.role == "sender")
    return RunResult(
        seconds=max(report.finished_at for report in completions) - started,
        send_seconds=sender.finished_at - started,
        messages=messages,
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.servicebus_throughput",
        description="Send + receive + complete throughput of the embedded broker, 1 KB messages.",
    )
    parser.add_argument("--messages", type=int, default=10_000, help="messages per run")
    parser.add_argument("--runs", type=int, default=5, help="runs per journal mode")
    parser.add_argument("--receivers", type=int, default=2, help="receiver processes")
    parser.add_argument(
        "--journal",
        choices=["both", *JOURNALS],
        default="both",
        help="broker in memory, with the SQLite journal (--data), or both",
    )
    args = parser.parse_args(argv)
    if args.messages < 1 or args.runs < 1 or args.receivers < 1:
        parser.error("--messages, --runs and --receivers must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    modes = list(JOURNALS) if args.journal == "both" else [args.journal]
    print(
        f"Service Bus broker: {args.messages:,} x {MESSAGE_BYTES} B messages, 1 sender + "
        f"{args.receivers} receivers (prefetch {PREFETCH}), runs per mode: {args.runs}; "
        f"{machine()}",
        flush=True,
    )
    spreads: dict[str, Spread] = {}
    try:
        for mode in modes:
            rates: list[float] = []
            for run in range(1, args.runs + 1):
                with (
                    tempfile.TemporaryDirectory(prefix="bench-servicebus-") as work_dir,
                    broker_process(Path(work_dir), JOURNALS[mode]) as connection_string,
                ):
                    result = measure_run(connection_string, args.messages, args.receivers)
                rates.append(result.msgs_per_second)
                print(
                    f"  {mode:<6} run {run}/{args.runs}: {result.msgs_per_second:,.0f} msgs/s "
                    f"in {result.seconds:.2f} s "
                    f"(the sender was done after {result.send_seconds:.2f} s)",
                    flush=True,
                )
            spreads[mode] = Spread.of(rates)
    except BenchError as exc:
        print(f"servicebus benchmark failed: {exc}", file=sys.stderr)
        return 1
    print()
    print(summary(spreads, args.messages))
    return 0


def summary(spreads: dict[str, Spread], messages: int) -> str:
    rows = [
        [
            "in memory" if mode == "memory" else "SQLite journal (--data)",
            f"{messages:,}",
            str(spread.runs),
            f"{spread.median:,.0f}",
            f"{spread.low:,.0f}",
            f"{spread.high:,.0f}",
            verdict(spread.median >= GOAL_MSGS_PER_SECOND),
        ]
        for mode, spread in spreads.items()
    ]
    headers = ["broker", "messages", "runs", "median msgs/s", "min", "max"]
    return markdown_table([*headers, f"goal {GOAL_MSGS_PER_SECOND:,} msgs/s"], rows)


if __name__ == "__main__":
    sys.exit(main())
