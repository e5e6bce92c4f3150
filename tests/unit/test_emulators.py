"""The official emulators' files agree with the emulators' rules, with each other and the app.

`emulators/compose.yaml` is parsed with a YAML 1.2 parser (the `yaml` package of
node_modules, which `npm ci` installs); no container is started here. The emulator's limits
below are copied from its Config-schema.json (Azure/azure-service-bus-emulator-installer,
ServiceBus-Emulator/Schema), not from tools/emulators.py, so the generator is held to them.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from devhost.servicebus.config import load_config, parse_duration

from tools.emulators import (
    COMMAND,
    COMPOSE_FILE,
    EMULATOR_CONFIG,
    EMULATOR_PROFILE,
    EMULATOR_SETTINGS,
    EmulatorConfigError,
    emulator_config,
    made_files,
)

ROOT = Path(__file__).resolve().parents[2]
BROKER_CONFIG = ROOT / "servicebus.config.json"
SAMPLE = ROOT / "local.settings.sample.json"
PARSE_BOUND_SECONDS = 30

# Config-schema.json: the namespace name (an enum of one), the entity count and each queue
# property's range.
NAMESPACE = "sbemulatorns"
MAX_ENTITIES = 50
DURATION_RANGES = {
    "DefaultMessageTimeToLive": (timedelta(minutes=5), timedelta(hours=1)),
    "DuplicateDetectionHistoryTimeWindow": (timedelta(seconds=5), timedelta(minutes=5)),
    "LockDuration": (timedelta(seconds=5), timedelta(minutes=5)),
}
SCHEMA_QUEUE_PROPERTIES = {
    *DURATION_RANGES,
    "DeadLetteringOnMessageExpiration",
    "ForwardDeadLetteredMessagesTo",
    "ForwardTo",
    "MaxDeliveryCount",
    "RequiresDuplicateDetection",
    "RequiresSession",
}
# What the emulator changes locally, as the docs say: messages expire after an hour and
# duplicates are detected over 5 minutes.
LOWERED = {"DefaultMessageTimeToLive": "PT1H", "DuplicateDetectionHistoryTimeWindow": "PT5M"}
# The simulated remote services (python -m tools.simulators.services), not an emulator.
SIMULATOR_PORT = 7072
LOCAL_URL = re.compile(r"(?P<scheme>https?|sb)://(?:localhost|127\.0\.0\.1)(?::(?P<port>\d+))?")
DEFAULT_PORTS = {"sb": 5672, "http": 80, "https": 443}


def read_json(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """compose.yaml as a YAML 1.2 parser reads it."""
    node = shutil.which("node")
    assert node is not None, "node is needed to parse the compose file (make setup installs it)"
    script = (
        "const yaml = require('yaml'); const fs = require('fs');"
        "const doc = yaml.parseDocument(fs.readFileSync(process.argv[1], 'utf8'));"
        "if (doc.errors.length) { console.error(doc.errors.join('\\n')); process.exit(1); }"
        "process.stdout.write(JSON.stringify(doc.toJS()));"
    )
    parsed = subprocess.run(
        [node, "-e", script, str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=PARSE_BOUND_SECONDS,
        check=False,
    )
    assert parsed.returncode == 0, parsed.stderr
    document: dict[str, Any] = json.loads(parsed.stdout)
    return document


@pytest.fixture(scope="module")
def profile() -> dict[str, str]:
    values: dict[str, str] = read_json(EMULATOR_PROFILE)["Values"]
    return values


def published(service: dict[str, Any]) -> dict[int, int]:
    """Host port -> container port of each `ports` entry ("HOST:CONTAINER")."""
    pairs = (str(entry).rsplit(":", 2)[-2:] for entry in service.get("ports", []))
    return {int(host): int(container) for host, container in pairs}


# --- the generated files ---------------------------------------------------------------------


def test_the_checked_in_files_are_what_the_generator_makes() -> None:
    for path, made in made_files().items():
        written = path.read_text(encoding="utf-8")
        difference = "".join(
            difflib.unified_diff(
                written.splitlines(keepends=True), made.splitlines(keepends=True), str(path)
            )
        )
        assert written == made, f"{path.name} is out of date: run `{COMMAND}`\n{difference}"


# --- the Service Bus emulator's Config.json --------------------------------------------------


def test_the_emulator_config_has_the_namespace_topics_and_logging_the_schema_requires() -> None:
    user_config = read_json(EMULATOR_CONFIG)["UserConfig"]
    (namespace,) = user_config["Namespaces"]
    assert namespace["Name"] == NAMESPACE
    assert namespace["Topics"] == []
    assert len(namespace["Queues"]) + len(namespace["Topics"]) <= MAX_ENTITIES
    assert user_config["Logging"]["Type"] in {"File", "Console", "File,Console", "Console,File"}


def test_every_queue_property_is_one_the_schema_has_and_within_its_limits() -> None:
    (namespace,) = read_json(EMULATOR_CONFIG)["UserConfig"]["Namespaces"]
    for queue in namespace["Queues"]:
        properties = queue["Properties"]
        assert set(properties) <= SCHEMA_QUEUE_PROPERTIES, queue["Name"]
        for key, (low, high) in DURATION_RANGES.items():
            if key in properties:
                assert low <= parse_duration(properties[key]) <= high, (queue["Name"], key)
        assert 1 <= properties.get("MaxDeliveryCount", 3) <= 10, queue["Name"]
        assert properties["DefaultMessageTimeToLive"] == "PT1H", queue["Name"]


def test_every_queue_keeps_its_properties_but_the_two_the_emulator_caps() -> None:
    (source,) = read_json(BROKER_CONFIG)["UserConfig"]["Namespaces"]
    (emulated,) = read_json(EMULATOR_CONFIG)["UserConfig"]["Namespaces"]
    expected = {
        queue["Name"]: {
            **queue.get("Properties", {}),
            **{key: value for key, value in LOWERED.items() if key in queue.get("Properties", {})},
        }
        for queue in source["Queues"]
    }
    got = {queue["Name"]: dict(queue["Properties"]) for queue in emulated["Queues"]}
    for properties in got.values():
        # Written on every queue: the emulator's maximum, and its default too.
        properties.pop("DefaultMessageTimeToLive")
    for properties in expected.values():
        properties.pop("DefaultMessageTimeToLive", None)
    assert got == expected


def test_every_queue_the_app_uses_is_in_the_emulator_config(profile: dict[str, str]) -> None:
    used = {value for name, value in profile.items() if name.endswith("_QUEUE")}
    used |= set(profile["REPLY_QUEUES"].split(","))
    (namespace,) = read_json(EMULATOR_CONFIG)["UserConfig"]["Namespaces"]
    assert used <= {queue["Name"] for queue in namespace["Queues"]}


def test_the_devhost_broker_reads_the_emulator_config_as_the_same_queues() -> None:
    emulated = load_config(EMULATOR_CONFIG)
    source = load_config(BROKER_CONFIG)
    assert emulated.namespace == NAMESPACE
    assert set(emulated.queues) == set(source.queues)
    for key, queue in source.queues.items():
        assert emulated.queues[key].lock_duration == queue.lock_duration
        assert emulated.queues[key].max_delivery_count == queue.max_delivery_count


def test_a_queue_outside_the_emulator_limits_is_refused_not_silently_changed() -> None:
    def document(properties: dict[str, Any]) -> dict[str, Any]:
        return {"UserConfig": {"Namespaces": [{"Name": "x", "Queues": [
            {"Name": "q", "Properties": properties}
        ]}]}}  # fmt: skip

    lowered = emulator_config(document({"DefaultMessageTimeToLive": "P14D"}))
    assert lowered["UserConfig"]["Namespaces"][0]["Queues"][0]["Properties"] == {
        "DefaultMessageTimeToLive": "PT1H"
    }
    for refused in (
        {"LockDuration": "PT10M"},
        {"MaxDeliveryCount": 20},
        {"EnablePartitioning": True},
    ):
        with pytest.raises(EmulatorConfigError, match="queue q"):
            emulator_config(document(refused))


# --- compose.yaml and the settings profile --------------------------------------------------


def test_the_compose_file_runs_each_emulator_from_its_official_image(
    compose: dict[str, Any],
) -> None:
    images = {name: service["image"].split(":")[0] for name, service in compose["services"].items()}
    assert images == {
        "azurite": "mcr.microsoft.com/azure-storage/azurite",
        "sqledge": "mcr.microsoft.com/azure-sql-edge",
        "servicebus": "mcr.microsoft.com/azure-messaging/servicebus-emulator",
        "dts": "mcr.microsoft.com/dts/dts-emulator",
        "cosmos": "mcr.microsoft.com/cosmosdb/linux/azure-cosmos-emulator",
    }


def test_the_service_bus_emulator_gets_the_generated_config_and_its_database(
    compose: dict[str, Any],
) -> None:
    servicebus = compose["services"]["servicebus"]
    mounts = {}
    for volume in servicebus["volumes"]:
        source, target = volume.split(":")[:2]
        mounts[target] = (COMPOSE_FILE.parent / source).resolve()
    assert mounts["/ServiceBus_Emulator/ConfigFiles/Config.json"] == EMULATOR_CONFIG
    assert servicebus["environment"]["SQL_SERVER"] in compose["services"]
    assert servicebus["depends_on"] == [servicebus["environment"]["SQL_SERVER"]]
    database = compose["services"][servicebus["environment"]["SQL_SERVER"]]["environment"]
    assert database["MSSQL_SA_PASSWORD"] == servicebus["environment"]["MSSQL_SA_PASSWORD"]


def test_the_task_hub_of_the_profile_is_one_the_dts_emulator_serves(
    compose: dict[str, Any], profile: dict[str, str]
) -> None:
    hubs = compose["services"]["dts"]["environment"]["DTS_TASK_HUB_NAMES"].split(",")
    assert profile["TASKHUB_NAME"] in hubs
    host_json = read_json(ROOT / "host.json")
    assert host_json["extensions"]["durableTask"]["hubName"] == "%TASKHUB_NAME%"


def test_each_local_address_of_the_profile_is_a_port_its_emulator_publishes(
    compose: dict[str, Any], profile: dict[str, str]
) -> None:
    publisher = {
        host_port: (name, container_port)
        for name, service in compose["services"].items()
        for host_port, container_port in published(service).items()
    }
    unpublished = set()
    for setting, value in profile.items():
        for address in LOCAL_URL.finditer(value):
            port = int(address["port"] or DEFAULT_PORTS[address["scheme"]])
            if port not in publisher:
                unpublished.add((setting, port))
                continue
            service, container_port = publisher[port]
            assert setting in EMULATOR_SETTINGS, f"{setting} reaches {service} unlisted"
            assert service == EMULATOR_SETTINGS[setting].service, setting
            # The Cosmos DB SDK follows the endpoint the gateway advertises: same port inside.
            assert container_port == port, (setting, service)
    assert {port for _, port in unpublished} == {SIMULATOR_PORT}, unpublished
    assert {setting for setting, _ in unpublished} == {
        "STOCK_SERVICE_URL",
        "PAYMENT_SERVICE_URL",
        "SHIPPING_SERVICE_URL",
    }


def test_the_profile_is_the_sample_with_only_the_emulator_settings_changed(
    profile: dict[str, str],
) -> None:
    sample: dict[str, str] = read_json(SAMPLE)["Values"]
    assert set(profile) == set(sample)
    changed = {name for name in sample if profile[name] != sample[name]}
    assert changed <= set(EMULATOR_SETTINGS)
    assert profile["STATE_STORE"] == "cosmos"
    assert profile["CosmosConnection"].startswith("AccountEndpoint=http://localhost:8081/;")


def test_make_emulators_prints_each_step_with_files_that_exist() -> None:
    """Without ACCEPT_EULA=Y it starts nothing and prints every command, in order."""
    make = shutil.which("make")
    assert make is not None
    environment = {name: value for name, value in os.environ.items() if name != "ACCEPT_EULA"}
    printed = subprocess.run(
        [make, "-s", "emulators"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=PARSE_BOUND_SECONDS,
        check=True,
    ).stdout
    steps = [line.split(" ", 1)[1] for line in printed.splitlines() if re.match(r"\d\. ", line)]
    assert steps[0] == f"ACCEPT_EULA=Y docker compose -f {COMPOSE_FILE.relative_to(ROOT)} up -d"
    assert steps[1] == f"cp {EMULATOR_PROFILE.relative_to(ROOT)} local.settings.json"
    assert "tools.simulators.services --port 7072" in steps[2]
    assert steps[3] == "func start"
    assert "messages expire after 1 hour" in printed
    assert "duplicates detected over 5 minutes" in printed
