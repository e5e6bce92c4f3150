"""``python -m tools.demo``: run the order pipeline locally under faults and report.

Exits 0 when every invariant of the report held (`demo.report`: nothing lost or stuck, no
side effect twice, nothing left behind by a Compensated order, no step after compensation
began), 1 otherwise, 2 when it could not run. ``--backend cosmos`` runs it on the Cosmos
adapter against a local Cosmos DB API server it starts; without ``--backend``, STATE_STORE
and the Cosmos settings of the environment decide, so the same command runs against the
emulator or an account. ``--telemetry-export FILE`` writes the run's traces and metrics (the
devhost, its workers, the simulated services and the client) as OTLP JSON lines (C9).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

from devhost import event_loop
from devhost.cli import run_command

from config import STATE_STORES
from tools.simulators.services import PRESET_NAMES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.demo",
        description=(
            "Start the embedded broker, the simulated remote services and the devhost with the "
            "app, submit orders from a client app with its own reply queue, and report final "
            "states, retries, compensations, dead letters, status messages, latency, the Azure "
            "cost of 1,000 orders and at rest (priced from tools/prices.json) and the "
            "invariants, checked on the services' ledgers and the state store."
        ),
    )
    parser.add_argument("--orders", type=int, default=200, help="valid orders to submit")
    parser.add_argument(
        "--faults",
        choices=PRESET_NAMES,
        default="default",
        help="fault preset of the simulated services; except with none, a few orders also "
        "follow scripted paths (Error, Compensated, CompensationFailed, supervisor retries)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the workload and faults")
    parser.add_argument("--report", type=Path, default=None, help="write the report as JSON")
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="keep the run's stores, histories, broker journal and settings here, for "
        "`python -m tools.demo.console` (default: a temp dir, removed at the end)",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=120.0,
        help="how long to wait after the last submission for orders to finish",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--backend",
        choices=STATE_STORES,
        default=None,
        help=(
            "state store and orders database: sqlite (embedded) or cosmos, on a local Cosmos "
            "DB API server the demo starts (npm @vercel/cosmosdb-server). Without it, "
            "STATE_STORE, CosmosConnection and COSMOS_DATABASE from the environment decide "
            "(default sqlite)"
        ),
    )
    parser.add_argument(
        "--worker-processes",
        type=int,
        choices=range(0, 9),
        default=1,
        metavar="N",
        help="language worker processes that run the app's functions, 0-8 (default 1; 0: in "
        "the demo's own process)",
    )
    parser.add_argument(
        "--telemetry-export",
        default=None,
        metavar="FILE|console",
        help="write the run's traces and metrics as OTLP JSON lines to FILE (replaced), or "
        "to standard error with 'console'",
    )
    parser.set_defaults(run=run_demo_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv)


def run_demo_command(args: argparse.Namespace) -> int:
    # The pipeline's own logs would drown the progress bar; the report says what happened.
    if logging.getLogger().level < logging.WARNING:
        logging.getLogger().setLevel(logging.ERROR)
    quiet_cosmos_sdk()
    from tools.demo.pipeline import local_store_settings

    with contextlib.ExitStack() as stores:
        try:
            settings = stores.enter_context(local_store_settings(args.backend))
        except RuntimeError as error:
            print(f"demo: cannot start the local Cosmos DB API server: {error}", file=sys.stderr)
            return 2
        return _run(args, settings)


def quiet_cosmos_sdk() -> None:
    """Silence two kinds of azure-cosmos noise that say nothing about the run.

    The SDK skips certificate checks for localhost and 127.0.0.1 only (the emulator's and the
    local server's self-signed certificates) and urllib3 warns on every such request. A client
    closed soon after it opened (the report's own stores) logs, at ERROR, the endpoint health
    check it started in the background; the operations themselves raise their own failures.
    """
    from urllib3.exceptions import InsecureRequestWarning

    warnings.filterwarnings("ignore", category=InsecureRequestWarning)
    logging.getLogger("azure.cosmos._GlobalEndpointManager").setLevel(logging.CRITICAL)


def _run(args: argparse.Namespace, settings: Mapping[str, str]) -> int:
    from config import SettingsError
    from tools.demo.console import where_to_open
    from tools.demo.run import DemoOptions, run_demo, write_report

    options = DemoOptions(
        orders=args.orders,
        faults=args.faults,
        seed=args.seed,
        report_path=args.report,
        work_dir=args.work_dir,
        settle_seconds=args.settle_seconds,
        progress=not args.no_progress,
        settings=settings,
        worker_processes=args.worker_processes,
        telemetry_export=args.telemetry_export,
    )
    try:
        report = event_loop.run(run_demo(options))
    except SettingsError as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2
    write_report(report, args.report)
    if args.telemetry_export not in (None, "console"):
        print(
            f"Traces and metrics (OTLP JSON lines) written to {args.telemetry_export} "
            "(one ExportTraceServiceRequest or ExportMetricsServiceRequest per line)"
        )
    for line in where_to_open(args.work_dir):
        print(line)
    return 1 if report.failed else 0
