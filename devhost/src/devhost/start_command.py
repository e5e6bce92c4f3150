"""``python -m devhost start``: run a Functions app locally until stopped.

    python -m devhost start [--app function_app[:app]] [--app-root .] [--data .devhost]
                            [--http-port 7071] [--broker-config servicebus.config.json
                            [--broker-port 5672] [--broker-data .devhost/servicebus.sqlite]]
                            [--telemetry-export telemetry.jsonl|console]

With ``--broker-config`` the embedded Service Bus broker starts in the same process and
``ServiceBusConnection`` points at it; without it, ``ServiceBusConnection`` from
local.settings.json or the environment is used (a broker started with ``python -m devhost
servicebus``, or a real namespace). Real time; orchestration histories, timer schedules and
(with ``--broker-data``) queued messages survive a kill -9 and resume on the next start.
``--telemetry-export`` (the ``DEVHOST_TELEMETRY_EXPORT`` setting) writes the traces and metrics
of the devhost and its workers as OTLP JSON lines to a file, or to the console (C9).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from devhost import event_loop
from devhost.function_keys import KEYS_FILE
from devhost.host import DevHost, HostOptions
from devhost.indexing import IndexingError
from devhost.settings import AppSettings, SettingsError
from devhost.telemetry import EXPORT_SETTING

SERVICE_BUS_CONNECTION = "ServiceBusConnection"


def add_start(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "start",
        help="run a Functions app's triggers, orchestrations and activities locally",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument(
        "--app",
        default="function_app",
        help="the app's module (default function_app, as the Python worker's "
        "function_app.py), optionally :attribute; without one, its one top-level FunctionApp",
    )
    parser.add_argument(
        "--app-root", default=".", help="folder holding the app, host.json and local.settings.json"
    )
    parser.add_argument("--data", default=".devhost", help="folder for the devhost's state")
    parser.add_argument("--http-port", type=int, default=7071, help="port of HTTP triggers")
    parser.add_argument(
        "--broker-config",
        default=None,
        help="start the embedded Service Bus broker with this Config.json",
    )
    parser.add_argument("--broker-port", type=int, default=5672, help="embedded broker's port")
    parser.add_argument(
        "--broker-data",
        default=None,
        help="SQLite file that keeps the embedded broker's messages durable",
    )
    parser.add_argument(
        "--worker-processes",
        type=_non_negative,
        default=0,
        help=(
            "run function code (orchestrators, activities, Service Bus and timer functions) in "
            "this many language worker processes, as FUNCTIONS_WORKER_PROCESS_COUNT on Azure "
            "(default 0: in the devhost's own process; HTTP functions always run there)"
        ),
    )
    parser.add_argument(
        "--telemetry-export",
        default=None,
        metavar="FILE|console",
        help=(
            "export the traces and metrics of the devhost and its language workers as OTLP "
            f"JSON lines to FILE, or to standard error with 'console' (setting {EXPORT_SETTING})"
        ),
    )
    parser.set_defaults(run=run_start)


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def run_start(args: argparse.Namespace) -> int:
    try:
        return event_loop.run(_serve(args))
    except (IndexingError, SettingsError, ValueError, OSError) as error:
        print(f"devhost start: {error}", file=sys.stderr)
        return 2


async def _serve(args: argparse.Namespace) -> int:
    from devhost.servicebus.config import load_config
    from devhost.servicebus.server import ServiceBusBroker

    app_root = Path(args.app_root)
    values = dict(AppSettings.load(app_root).values)
    broker: ServiceBusBroker | None = None
    if args.broker_config:
        broker = ServiceBusBroker(
            load_config(args.broker_config), port=args.broker_port, data_path=args.broker_data
        )
        broker.start()
        values[SERVICE_BUS_CONNECTION] = broker.connection_string
        print(f"servicebus listening on {broker.host}:{broker.port}", flush=True)
    if args.telemetry_export:
        values[EXPORT_SETTING] = args.telemetry_export
    options = HostOptions(
        app=args.app,
        app_root=app_root,
        data_dir=Path(args.data),
        http_port=args.http_port,
        worker_processes=args.worker_processes,
    )
    host = DevHost(options, AppSettings(values))

    def ready(host: DevHost) -> None:
        assert host.http is not None
        print(
            f"devhost ready: {len(host.functions)} functions, http port {host.http.port}, "
            f"function keys in {options.data_dir / KEYS_FILE}",
            flush=True,
        )

    try:
        return await serve_until_stopped(host, ready)
    finally:
        if broker is not None:
            broker.stop()


async def serve_until_stopped(host: DevHost, ready: Callable[[DevHost], None]) -> int:
    """Start ``host``, call ``ready`` with it, and serve until SIGINT or SIGTERM; then stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await host.start()
        ready(host)
        await stop.wait()
    finally:
        await host.stop()
    return 0
