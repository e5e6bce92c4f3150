"""Records the histories the gate replays in ``make test`` (C7, C3): ``make record-histories``.

Runs the demo once per agent shape (over the queue pair, as an activity): its scripted orders
follow every path of the workflow (agent retry, supervisor retry after the timer came first,
the first step failing, compensated, compensation failed, a stalled compensation resumed),
and a fault-free run adds the happy path. Every instance of those orders is written to
``tests/replay_histories/v<WORKFLOW_VERSION>/<shape>/``, its customer ids replaced (C3).
Run it only when a new workflow version is added: the histories of the versions the code
still serves stay as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devhost.durable.history import DTFX_NAMES, EventType, HistoryEvent

from domain.workflow import WORKFLOW_VERSION
from tools import cost
from tools.demo.pipeline import HOST_DATA_DIR
from tools.demo.run import DemoOptions, run_demo
from tools.demo.showcase import NO_FAULTS, SCRIPTED_PATHS
from tools.replay.sources import RECORDED

SHAPES = {"queue-pair": "servicebus", "activity": "activity"}
"""The folder of each agent shape, and its AGENT_TRANSPORT."""
REDACTED = "customer-redacted"
PAYLOAD_FIELDS = ("Input", "Result")
SEED = 1
HAPPY_SEED = 2
"""Another seed for the fault-free run, so that its order ids differ from the scripted ones."""


def redacted(value: Any) -> Any:
    """``value`` with every customer id replaced: histories keep no personal data (C3)."""
    if isinstance(value, dict):
        return {
            key: REDACTED if key.replace("_", "").lower() == "customerid" else redacted(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redacted(item) for item in value]
    return value


def redacted_event(event: HistoryEvent) -> dict[str, Any]:
    """The event as a status body shows it, its JSON payloads redacted."""
    shown: dict[str, Any] = {**event, "EventType": DTFX_NAMES[EventType(event["EventType"])]}
    for field in PAYLOAD_FIELDS:
        text = shown.get(field)
        if isinstance(text, str):
            with contextlib.suppress(ValueError):
                shown[field] = json.dumps(redacted(json.loads(text)))
    return shown


async def _histories(
    shape: str, faults: str, orders: int, seed: int
) -> dict[str, list[HistoryEvent]]:
    with tempfile.TemporaryDirectory(prefix="record-") as scratch:
        work = Path(scratch)
        await run_demo(
            DemoOptions(
                orders=orders,
                faults=faults,
                seed=seed,
                work_dir=work,
                progress=False,
                settings={"AGENT_TRANSPORT": SHAPES[shape]},
            )
        )
        return await asyncio.to_thread(cost.orchestration_histories, [work / HOST_DATA_DIR])


def write(folder: Path, instance_id: str, events: list[HistoryEvent], path: str) -> None:
    body = {
        "instanceId": instance_id,
        "recordedPath": path,
        "historyEvents": [redacted_event(event) for event in events],
    }
    name = instance_id.replace(":", ".") + ".json"
    (folder / name).write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")


async def record(out: Path = RECORDED) -> list[Path]:
    """Record every path under both agent shapes; returns the folders written."""
    paths: Mapping[str, str] = {path.order_id(SEED): path.path for path in SCRIPTED_PATHS}
    written = []
    for shape in SHAPES:
        folder = out / f"v{WORKFLOW_VERSION}" / shape
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.json"):
            stale.unlink()
        scripted = await _histories(shape, "default", len(SCRIPTED_PATHS), SEED)
        happy = await _histories(shape, NO_FAULTS, 1, HAPPY_SEED)
        for instance_id, events in sorted(scripted.items()):
            order_id = instance_id.split(":", 1)[0]
            write(folder, instance_id, events, paths.get(order_id, "unscripted"))
        for instance_id, events in sorted(happy.items()):
            write(folder, instance_id, events, "happy path: no fault")
        written.append(folder)
    return written


def main() -> int:
    for folder in asyncio.run(record()):
        print(f"recorded {len(list(folder.glob('*.json')))} histories in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
