"""The replay gate's command line (C7): replay orchestration histories through the app's
current code and say, per instance, whether it replays.

    python -m tools.replay                          # the repository's recorded histories
    python -m tools.replay --histories DIR [DIR...] # status files with whole events
    python -m tools.replay --scheduler ENDPOINT --task-hub NAME   # a scheduler's in-flight ones
    python -m tools.replay --url URL --key=KEY      # a running app's Durable HTTP API (a summary:
                                                    # refused, see docs/replay.md)

Exit 0 when every instance replays, 1 when one does not (non-deterministic, or of a version
the code no longer serves), 2 when the gate cannot run (no app, an unreadable source, no
history at all). docs/replay.md shows each verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tools.replay.gate import judge, load
from tools.replay.scheduler import from_scheduler
from tools.replay.sources import (
    RECORDED,
    InstanceHistory,
    SourceError,
    from_app,
    from_directory,
)
from tools.replay.verdicts import RULE, Kind

CLEAN, BROKEN, CANNOT_RUN = 0, 1, 2


def parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parse = argparse.ArgumentParser(
        prog="python -m tools.replay",
        description="Replay orchestration histories through the app's current code (C7).",
    )
    parse.add_argument("--app", default="function_app:app", help="module:attribute of the app")
    parse.add_argument("--app-root", type=Path, default=Path("."), help="the app's folder")
    source = parse.add_mutually_exclusive_group()
    source.add_argument(
        "--histories", type=Path, nargs="+", help="folders of exported status JSON files"
    )
    source.add_argument("--url", help="a running app's base URL; its Running and Pending instances")
    source.add_argument(
        "--scheduler",
        help="a Durable Task Scheduler's endpoint; its task hub's Running and Pending instances,"
        " with DefaultAzureCredential over https",
    )
    parse.add_argument(
        "--task-hub",
        default=environ.get("TASKHUB_NAME"),
        help="the task hub for --scheduler (env TASKHUB_NAME)",
    )
    parse.add_argument(
        "--key",
        default=environ.get("REPLAY_GATE_KEY"),
        help="the Durable extension's system key for --url (env REPLAY_GATE_KEY)",
    )
    return parse


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] = os.environ) -> int:
    options = parser(environ).parse_args(argv)
    try:
        histories = asyncio.run(_histories(options))
        if not histories and options.url is None and options.scheduler is None:
            raise SourceError("no history to replay")
        app = load(options.app, options.app_root)
        verdicts = asyncio.run(judge(app, histories))
    except SourceError as error:
        print(f"replay gate cannot run: {error}", file=sys.stderr)
        return CANNOT_RUN
    for verdict in verdicts:
        print(verdict.line())
    broken = [v for v in verdicts if v.kind is not Kind.CLEAN]
    print(f"{len(verdicts) - len(broken)} of {len(verdicts)} instances replay")
    if broken:
        print(f"To ship this code without breaking them: {RULE}")
    return BROKEN if broken else CLEAN


async def _histories(options: argparse.Namespace) -> list[InstanceHistory]:
    if options.scheduler is not None:
        if not options.task_hub:
            raise SourceError("--scheduler needs --task-hub (or TASKHUB_NAME)")
        return await asyncio.to_thread(from_scheduler, options.scheduler, options.task_hub)
    if options.url is not None:
        return await from_app(options.url, options.key)
    folders = options.histories or [RECORDED]
    return [history for folder in folders for history in from_directory(folder)]
