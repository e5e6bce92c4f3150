"""Every recorded history replays through the current code, at every episode it went through:
no change ships that would break an order in flight (C7). The histories cover every path of
the workflow under both agent shapes and carry no personal data (C3)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from devhost.durable.history import EventType

from tools.demo.showcase import SCRIPTED_PATHS
from tools.replay.gate import judge, load
from tools.replay.record import REDACTED, SHAPES
from tools.replay.sources import RECORDED, InstanceHistory, from_directory
from tools.replay.verdicts import RULE, Kind

ROOT = Path(__file__).resolve().parents[3]


def in_flight(history: InstanceHistory) -> list[InstanceHistory]:
    """The history as the instance held it at the end of each of its episodes, as a
    deployment could find it, the whole of it last."""
    ends = [
        index + 1
        for index, event in enumerate(history.events)
        if event["EventType"] == EventType.ORCHESTRATOR_COMPLETED
    ]
    return [
        InstanceHistory(history.instance_id, history.events[:end], f"{history.origin}[:{end}]")
        for end in ends
    ]


async def test_every_recorded_history_replays_at_every_episode_c7() -> None:
    recorded = from_directory(RECORDED)
    histories = [prefix for history in recorded for prefix in in_flight(history)]

    verdicts = await judge(load("function_app:app", ROOT), histories)

    broken = [verdict.line() for verdict in verdicts if verdict.kind is not Kind.CLEAN]
    assert not broken, "\n".join(["Recorded orders in flight no longer replay:", *broken, RULE])
    assert len(verdicts) > len(recorded)


def test_the_recordings_cover_every_path_under_both_agent_shapes_c7() -> None:
    for shape in SHAPES:
        folder = next(RECORDED.glob(f"v*/{shape}"))
        paths = Counter(
            json.loads(path.read_text(encoding="utf-8"))["recordedPath"]
            for path in folder.glob("*.json")
        )
        assert {path.path for path in SCRIPTED_PATHS} | {"happy path: no fault"} <= set(paths)


def test_recorded_histories_carry_no_customer_id_c3() -> None:
    seen = 0
    for path in RECORDED.rglob("*.json"):
        text = path.read_text(encoding="utf-8")
        for event in json.loads(text)["historyEvents"]:
            for field in ("Input", "Result"):
                payload = event.get(field)
                if isinstance(payload, str) and "customer" in payload:
                    for customer in _customer_values(json.loads(payload)):
                        assert customer == REDACTED, f"{path}: a customer id is recorded"
                        seen += 1
    assert seen > 0


def _customer_values(value: object) -> list[object]:
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k.replace("_", "").lower() == "customerid"]
        return found + [item for v in value.values() for item in _customer_values(v)]
    if isinstance(value, list):
        return [item for v in value for item in _customer_values(v)]
    return []
