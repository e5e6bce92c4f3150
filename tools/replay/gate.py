"""The gate's judgement (C7): each history replayed through the app's current orchestrators
with the SDK's own replay and the devhost's translation, the engine the app runs on locally.

The app is indexed as the Python worker indexes it (``devhost.indexing.load_app``); the
versions it serves are its ``WORKFLOWS``, and a history that started under another version is
judged unserved without a replay.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from devhost.durable.registry import FunctionRegistry
from devhost.durable.replay import ReplayFunction
from devhost.durable.replay_check import check_history, started_event
from devhost.durable.workers import InProcessOrchestrators
from devhost.indexing import IndexingError, load_app

from tools.replay.sources import InstanceHistory, SourceError
from tools.replay.verdicts import Verdict, of_check, unserved


@dataclass(frozen=True)
class App:
    replay: ReplayFunction
    served: Collection[str]
    """The orchestration versions the code runs."""
    default_version: str | None
    """host.json's defaultVersion, which sub-orchestrations started without one get."""


def load(spec: str = "function_app:app", root: Path = Path(".")) -> App:
    """The app of ``spec`` under ``root``, ready to replay."""
    try:
        registry = FunctionRegistry.from_functions(load_app(spec, root).get_functions())
    except IndexingError as error:
        raise SourceError(f"cannot load {spec}: {error}") from error
    # Imported after the app, so that it is the module the app's orchestrator runs.
    from orchestrators.order_workflow import WORKFLOWS, orchestration_version

    return App(
        InProcessOrchestrators(registry).replay,
        frozenset(orchestration_version(version) for version in WORKFLOWS),
        _default_version(root / "host.json"),
    )


def _default_version(host_json: Path) -> str | None:
    try:
        host = json.loads(host_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    version = host.get("extensions", {}).get("durableTask", {}).get("defaultVersion")
    return None if version is None else str(version)


async def judge(app: App, histories: Sequence[InstanceHistory]) -> list[Verdict]:
    """One verdict per history, in order."""
    verdicts = []
    for history in histories:
        version = started_event(history.events).get("Version")
        if version not in app.served:
            verdicts.append(unserved(history.instance_id, version, app.served, history.origin))
            continue
        check = await check_history(
            history.instance_id, history.events, app.replay, app.default_version
        )
        verdicts.append(of_check(check, history.origin))
    return verdicts
