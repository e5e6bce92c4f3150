"""The official emulators' side of `func start`: their Service Bus config and the settings.

`emulators/compose.yaml` starts Azurite, the Service Bus emulator (with the Azure SQL Edge it
stores its state in), the Durable Task Scheduler emulator and the Cosmos DB emulator. This
module makes the two files that go with it, from the files the devhost already reads, so
there is one source for the queues and one for the settings:

- `emulators/servicebus-emulator.json`, the Service Bus emulator's `Config.json`, from
  `servicebus.config.json`: the same queues and properties, in the namespace the emulator
  requires, with `Topics`, and inside the emulator's limits (`EMULATOR_LIMITS`);
- `emulators/local.settings.emulators.json`, `local.settings.sample.json` with each
  connection pointed at its emulator (`EMULATOR_SETTINGS`).

tests/unit/test_emulators.py fails when either file is not what this module makes.
Regenerate them with:

    python -m tools.emulators
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from devhost.servicebus.config import parse_duration

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python -m tools.emulators"
BROKER_CONFIG = ROOT / "servicebus.config.json"
SAMPLE_SETTINGS = ROOT / "local.settings.sample.json"
EMULATORS = ROOT / "emulators"
COMPOSE_FILE = EMULATORS / "compose.yaml"
EMULATOR_CONFIG = EMULATORS / "servicebus-emulator.json"
EMULATOR_PROFILE = EMULATORS / "local.settings.emulators.json"

# The emulator's Config-schema.json (Azure/azure-service-bus-emulator-installer,
# ServiceBus-Emulator/Schema): the one namespace it serves, by this name only.
EMULATOR_NAMESPACE = "sbemulatorns"
MAX_ENTITIES = 50
QUEUE_PROPERTIES = frozenset(
    {
        "DeadLetteringOnMessageExpiration",
        "DefaultMessageTimeToLive",
        "DuplicateDetectionHistoryTimeWindow",
        "ForwardDeadLetteredMessagesTo",
        "ForwardTo",
        "LockDuration",
        "MaxDeliveryCount",
        "RequiresDuplicateDetection",
        "RequiresSession",
    }
)


@dataclass(frozen=True)
class Limit:
    """The range the emulator's schema allows a queue property, and its ISO-8601 maximum."""

    minimum: timedelta
    maximum: timedelta
    maximum_text: str


# Durations beyond their maximum are lowered to it: these two are the local differences the
# docs state (messages expire after an hour, duplicates are detected over 5 minutes).
EMULATOR_LIMITS: Mapping[str, Limit] = {
    "DefaultMessageTimeToLive": Limit(timedelta(minutes=5), timedelta(hours=1), "PT1H"),
    "DuplicateDetectionHistoryTimeWindow": Limit(
        timedelta(seconds=5), timedelta(minutes=5), "PT5M"
    ),
    "LockDuration": Limit(timedelta(seconds=5), timedelta(minutes=5), "PT5M"),
}
LOWERED_TO_LIMIT = frozenset({"DefaultMessageTimeToLive", "DuplicateDetectionHistoryTimeWindow"})
MAX_DELIVERY_COUNT = range(1, 11)


@dataclass(frozen=True)
class EmulatorSetting:
    """A setting the profile changes: its value and the compose service it concerns."""

    value: str
    service: str


# The emulators' well-known local credentials, as their documentation publishes them: Azurite's
# devstoreaccount1 key, the Service Bus emulator's SAS_KEY_VALUE, the Cosmos DB emulator's key.
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
COSMOS_EMULATOR_KEY = (
    "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU9DAVoBQz9B5fBqTSY3Ez7uKGdyRMgJq8NUvShxbVIY5gHjw=="
)
TASK_HUB = "orderprocessing"

EMULATOR_SETTINGS: Mapping[str, EmulatorSetting] = {
    "AzureWebJobsStorage": EmulatorSetting(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        f"AccountKey={AZURITE_KEY};"
        "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
        "QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;"
        "TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;",
        "azurite",
    ),
    "ServiceBusConnection": EmulatorSetting(
        "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;",
        "servicebus",
    ),
    "DURABLE_TASK_SCHEDULER_CONNECTION_STRING": EmulatorSetting(
        "Endpoint=http://localhost:8080;Authentication=None", "dts"
    ),
    # The emulator serves the hubs DTS_TASK_HUB_NAMES names (compose.yaml), else only `default`.
    "TASKHUB_NAME": EmulatorSetting(TASK_HUB, "dts"),
    "STATE_STORE": EmulatorSetting("cosmos", "cosmos"),
    # http: the emulator's gateway speaks plain HTTP by default, so the SDK needs no certificate.
    "CosmosConnection": EmulatorSetting(
        f"AccountEndpoint=http://localhost:8081/;AccountKey={COSMOS_EMULATOR_KEY};",
        "cosmos",
    ),
}


class EmulatorConfigError(ValueError):
    """servicebus.config.json holds what the emulator's schema refuses; the message says what."""


def emulator_config(broker_config: Mapping[str, Any]) -> dict[str, Any]:
    """The Service Bus emulator's Config.json for the queues of `broker_config`."""
    (namespace,) = broker_config["UserConfig"]["Namespaces"]
    queues = namespace.get("Queues", [])
    if len(queues) > MAX_ENTITIES:
        raise EmulatorConfigError(f"{len(queues)} queues; the emulator takes {MAX_ENTITIES}")
    return {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": EMULATOR_NAMESPACE,
                    "Queues": [_emulator_queue(queue) for queue in queues],
                    "Topics": [],
                }
            ],
            "Logging": {"Type": "Console"},
        }
    }


def _emulator_queue(queue: Mapping[str, Any]) -> dict[str, Any]:
    name = queue["Name"]
    properties = dict(queue.get("Properties", {}))
    unknown = sorted(set(properties) - QUEUE_PROPERTIES)
    if unknown:
        raise EmulatorConfigError(f"queue {name}: the emulator has no {', '.join(unknown)}")
    # The emulator's own default is an hour; written out, the limit shows in the file.
    properties.setdefault("DefaultMessageTimeToLive", "PT1H")
    for key, limit in EMULATOR_LIMITS.items():
        if key not in properties:
            continue
        duration = parse_duration(properties[key])
        if duration > limit.maximum and key in LOWERED_TO_LIMIT:
            properties[key] = limit.maximum_text
        elif not limit.minimum <= duration <= limit.maximum:
            raise EmulatorConfigError(
                f"queue {name}: {key} {properties[key]} is outside the emulator's range"
            )
    count = properties.get("MaxDeliveryCount")
    if count is not None and count not in MAX_DELIVERY_COUNT:
        raise EmulatorConfigError(f"queue {name}: MaxDeliveryCount {count} is not 1-10")
    return {"Name": name, "Properties": properties}


def emulator_profile(sample: Mapping[str, Any]) -> dict[str, Any]:
    """local.settings.sample.json with each connection pointed at its emulator."""
    values = dict(sample["Values"])
    missing = sorted(set(EMULATOR_SETTINGS) - set(values))
    if missing:
        raise KeyError(f"local.settings.sample.json lacks {', '.join(missing)}")
    values.update({name: setting.value for name, setting in EMULATOR_SETTINGS.items()})
    return {**sample, "Values": values}


def render(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2) + "\n"


def made_files() -> dict[Path, str]:
    """Each generated file and the text this module makes for it."""
    broker = json.loads(BROKER_CONFIG.read_text(encoding="utf-8"))
    sample = json.loads(SAMPLE_SETTINGS.read_text(encoding="utf-8"))
    return {
        EMULATOR_CONFIG: render(emulator_config(broker)),
        EMULATOR_PROFILE: render(emulator_profile(sample)),
    }


def main() -> int:
    for path, text in made_files().items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
