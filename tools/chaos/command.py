"""``python -m tools.chaos`` (``make chaos``): the pipeline under crashes and faults.

Exits 0 when every invariant held (`chaos.invariants`), 1 when one broke, 2 when it could not
run. ``--report FILE`` writes the JSON report: the invariants with examples of any violation,
the faults injected by kind, every crash with its time and its time to recover, the final
states, and a timeline (submitted, in flight and finished orders per second, the crashes on
the same time axis) for a chart.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from devhost import event_loop
from devhost.cli import run_command

from config import STATE_STORES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.chaos",
        description=(
            "Run the broker, the simulated services and the devhost as processes of their "
            "own, submit orders at a steady rate while the services inject faults and a "
            "seeded schedule kills (SIGKILL) and restarts the devhost, the broker and the "
            "services; then check, on the services' ledgers, the state store and the queues, "
            "that nothing was lost, doubled, left half-undone or left unreported."
        ),
    )
    parser.add_argument("--orders", type=int, default=2000, help="valid orders to submit")
    parser.add_argument("--seed", type=int, default=1, help="seed of workload, faults, crashes")
    parser.add_argument("--report", type=Path, default=None, help="write the report as JSON")
    parser.add_argument("--rate", type=float, default=15.0, help="orders submitted per second")
    parser.add_argument("--devhost-kills", type=int, default=3, help="kill -9s of the devhost")
    parser.add_argument("--broker-kills", type=int, default=2, help="kill -9s of the broker")
    parser.add_argument(
        "--services-kills", type=int, default=2, help="kill -9s of the simulated services"
    )
    parser.add_argument(
        "--claim-crashes",
        type=int,
        default=2,
        help="starters that claim Pending orders and die before starting them",
    )
    parser.add_argument(
        "--no-second-scheduler",
        action="store_true",
        help="no second devhost whose starter and supervisor compete over the same store",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=300.0,
        help="how long to wait after the last submission and crash for orders to finish",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="keep the run's stores, histories, journals and process logs here "
        "(default: a temp dir, removed at the end)",
    )
    parser.add_argument(
        "--backend",
        choices=STATE_STORES,
        default="sqlite",
        help="state store and orders database: sqlite (embedded files in the work directory) "
        "or cosmos, the Cosmos DB adapter on a local Cosmos DB API server the run starts "
        "(npm @vercel/cosmosdb-server)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress line")
    parser.set_defaults(run=run_chaos_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv)


def run_chaos_command(args: argparse.Namespace) -> int:
    from config import SettingsError
    from tools.chaos.report_page import write_page
    from tools.chaos.run import ChaosOptions, run_chaos, write_report
    from tools.chaos.schedule import CrashKind
    from tools.demo.command import quiet_cosmos_sdk

    quiet_cosmos_sdk()
    if logging.getLogger().level < logging.WARNING:
        logging.getLogger().setLevel(logging.ERROR)
    options = ChaosOptions(
        orders=args.orders,
        seed=args.seed,
        rate=args.rate,
        crashes={
            CrashKind.DEVHOST: args.devhost_kills,
            CrashKind.BROKER: args.broker_kills,
            CrashKind.SERVICES: args.services_kills,
            CrashKind.CLAIM: args.claim_crashes,
        },
        second_scheduler=not args.no_second_scheduler,
        settle_seconds=args.settle_seconds,
        work_dir=args.work_dir,
        progress=not args.no_progress,
        backend=args.backend,
    )
    try:
        report = event_loop.run(run_chaos(options))
    except (SettingsError, RuntimeError) as error:
        print(f"chaos: {error}", file=sys.stderr)
        return 2
    write_report(report, args.report)
    write_page(report.to_json(), args.report)
    return 1 if report.failed else 0
