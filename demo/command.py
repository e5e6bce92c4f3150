"""``python -m devhost demo``: run the order pipeline locally under faults and report (issue 4).

Exits 0 when no order was lost or stuck and no side effect happened twice, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from simulators.fulfilment import PRESETS


def add_demo(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the order pipeline locally end to end and report",
        description=(
            "Start the embedded broker, the fulfilment simulator and the devhost with the app, "
            "submit orders from a client app with its own reply queue, and report final "
            "states, retries, dead letters, status messages, latency and cost per order."
        ),
    )
    parser.add_argument("--orders", type=int, default=200, help="valid orders to submit")
    parser.add_argument(
        "--faults",
        choices=sorted(PRESETS),
        default="default",
        help="fault mix of the fulfilment service",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the workload and faults")
    parser.add_argument("--report", type=Path, default=None, help="write the report as JSON")
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="keep the run's stores and histories here (default: a temp dir)",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=120.0,
        help="how long to wait after the last submission for orders to finish",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=run_demo_command)


def run_demo_command(args: argparse.Namespace) -> int:
    from demo.run import DemoOptions, run_demo, write_report

    # The pipeline's own logs would drown the progress bar; the report says what happened.
    if logging.getLogger().level < logging.WARNING:
        logging.getLogger().setLevel(logging.ERROR)
    options = DemoOptions(
        orders=args.orders,
        faults=args.faults,
        seed=args.seed,
        report_path=args.report,
        work_dir=args.work_dir,
        settle_seconds=args.settle_seconds,
        progress=not args.no_progress,
    )
    report = asyncio.run(run_demo(options))
    write_report(report, args.report)
    return 1 if report.failed else 0
