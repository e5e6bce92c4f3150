"""A minimal runner for the durable engine alone: ``python -m devhost.durable.worker``.

Loads ``--app module:attribute`` (a ``df.DFApp``), runs its orchestrations and activities
on ``--db`` with real time until SIGINT/SIGTERM.  Issue 3's crash test kills it with
SIGKILL mid-activity and resumes on the same file.  ``devhost start`` supersedes it for
apps with other triggers.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import signal
import sys
from typing import Any

from devhost.durable.engine import DEFAULT_MAX_CONCURRENT_ACTIVITIES, DurableEngine

logger = logging.getLogger("devhost.durable.worker")


def load_app(reference: str) -> Any:
    """Import ``module:attribute``; errors name what could not be found."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"--app must look like module:attribute, got {reference!r}")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise SystemExit(f"module {module_name!r} has no attribute {attribute!r}") from None


async def serve(app_reference: str, database: str, max_concurrent_activities: int) -> None:
    app = load_app(app_reference)
    engine = DurableEngine(
        app.get_functions(), database, max_concurrent_activities=max_concurrent_activities
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await engine.start()
    logger.info("durable worker ready app=%s db=%s", app_reference, database)
    await stop.wait()
    await engine.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m devhost.durable.worker")
    parser.add_argument("--app", required=True, help="module:attribute of the DFApp")
    parser.add_argument("--db", required=True, help="SQLite file holding the durable state")
    parser.add_argument(
        "--max-concurrent-activities",
        type=int,
        default=DEFAULT_MAX_CONCURRENT_ACTIVITIES,
        help="like host.json durableTask maxConcurrentActivityFunctions",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s"
    )
    asyncio.run(serve(args.app, args.db, args.max_concurrent_activities))


if __name__ == "__main__":
    main()
