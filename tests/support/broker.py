"""An embedded broker for tests outside the broker's own suite (devhost, app, demo)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from devhost.servicebus.config import parse_config
from devhost.servicebus.server import ServiceBusBroker


def queue(name: str, **properties: Any) -> dict[str, Any]:
    return {"Name": name, "Properties": properties}


@contextmanager
def running_broker(
    queues: Sequence[dict[str, Any]], data_path: Path | None = None
) -> Iterator[ServiceBusBroker]:
    document = {"UserConfig": {"Namespaces": [{"Name": "tests", "Queues": list(queues)}]}}
    with ServiceBusBroker(parse_config(document), data_path=data_path) as broker:
        yield broker


@contextmanager
def app_broker(config_file: Path, data_path: Path | None = None) -> Iterator[ServiceBusBroker]:
    """A broker with the entities of a Config.json file, such as the app's own."""
    from devhost.servicebus.config import load_config

    with ServiceBusBroker(load_config(config_file), data_path=data_path) as broker:
        yield broker
