"""Where the gate's histories come from (C7): exported status files, a running app's Durable
HTTP API, or the histories recorded in the repository (``RECORDED``).

A history is read from a status body (``instanceId``, ``historyEvents``) with its events whole,
as the recorder writes them. The Durable extension's HTTP API (``showHistory=true``), on Azure
as under the devhost, answers a summary instead (no ``EventId``, scheduling events folded into
their completions, event payloads and the version dropped), from which no replay can be made;
such a history is refused with that reason, never guessed at. Full histories of an app's
instances in flight come from its scheduler (``tools/replay/scheduler.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from devhost.durable.history import HistoryEvent
from devhost.durable.replay_check import UnreadableHistoryError, as_stored, started_event

RECORDED = Path(__file__).resolve().parents[2] / "tests" / "replay_histories"
"""The histories `make record-histories` recorded, one folder per workflow version."""
WEBHOOKS = "/runtime/webhooks/durabletask/"
RUNNING = ("Running", "Pending")
TIMEOUT = aiohttp.ClientTimeout(total=30)


class SourceError(Exception):
    """A source the gate cannot read: it cannot run (exit 2)."""


@dataclass(frozen=True)
class InstanceHistory:
    instance_id: str
    events: list[HistoryEvent]
    origin: str


def from_status(body: Any, origin: str) -> InstanceHistory:
    """The history of one status body."""
    if not isinstance(body, Mapping):
        raise SourceError(f"{origin}: not a status body (a JSON object with historyEvents)")
    instance_id, events = body.get("instanceId"), body.get("historyEvents")
    if not isinstance(instance_id, str) or not isinstance(events, list) or not events:
        raise SourceError(
            f"{origin}: no instanceId and historyEvents; export with showHistory=true"
        )
    if not all(isinstance(event, Mapping) and "EventId" in event for event in events):
        raise SourceError(
            f"{origin}: {instance_id} is a summarised history (events without EventId, as the "
            "Durable extension's HTTP API shows them): it drops the scheduling events and the "
            "event payloads a replay needs; read the app's scheduler instead (--scheduler)"
        )
    try:
        stored = [as_stored(dict(event)) for event in events]
        started_event(stored)
    except UnreadableHistoryError as error:
        raise SourceError(f"{origin}: {error}") from error
    return InstanceHistory(instance_id, stored, origin)


def from_directory(folder: Path) -> list[InstanceHistory]:
    """Every ``*.json`` status file under ``folder``, in path order."""
    if not folder.is_dir():
        raise SourceError(f"{folder}: no such directory of histories")
    found = []
    for path in sorted(folder.rglob("*.json")):
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise SourceError(f"{path}: cannot read it as JSON: {error}") from error
        found.append(from_status(body, str(path)))
    return found


async def from_app(
    url: str, key: str | None, statuses: Sequence[str] = RUNNING
) -> list[InstanceHistory]:
    """The histories of a running app's instances in ``statuses``, through its Durable HTTP API
    with the extension's system key."""
    base = url.rstrip("/") + WEBHOOKS
    auth = {} if key is None else {"code": key}
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            listed = await _get(
                session, base + "instances", {**auth, "runtimeStatus": ",".join(statuses)}
            )
            if not isinstance(listed, list):
                raise SourceError(f"{url}: the instance query did not answer a list")
            found = []
            for status in listed:
                instance_id = str(status.get("instanceId"))
                body = await _get(
                    session,
                    base + "instances/" + quote(instance_id, safe=""),
                    {
                        **auth,
                        "showHistory": "true",
                        "showHistoryOutput": "true",
                        "showInput": "true",
                    },
                )
                found.append(from_status(body, url))
            return found
    except (aiohttp.ClientError, TimeoutError) as error:
        raise SourceError(f"{url}: the Durable HTTP API cannot be reached: {error!r}") from error


async def _get(session: aiohttp.ClientSession, url: str, params: Mapping[str, str]) -> Any:
    async with session.get(url, params=params) as response:
        if response.status in (401, 403):
            raise SourceError(
                f"{url}: refused ({response.status}): give the extension's system key"
            )
        # The extension answers 202 for an instance still running, 200 once it finished.
        if response.status not in (200, 202):
            raise SourceError(f"{url}: answered {response.status}: {(await response.text())[:200]}")
        return await response.json()
