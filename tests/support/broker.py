"""An embedded broker for tests outside the broker's own suite (devhost, app, demo)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from devhost.servicebus.config import parse_config
from devhost.servicebus.server import ServiceBusBroker


def queue(name: str, **properties: Any) -> dict[str, Any]:
    return {"Name": name, "Properties": properties}


@contextmanager
def running_broker(queues: Sequence[dict[str, Any]]) -> Iterator[ServiceBusBroker]:
    document = {"UserConfig": {"Namespaces": [{"Name": "tests", "Queues": list(queues)}]}}
    with ServiceBusBroker(parse_config(document)) as broker:
        yield broker
