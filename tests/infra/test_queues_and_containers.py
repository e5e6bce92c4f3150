"""Azure gets exactly the queues of servicebus.config.json and the containers of
adapters/cosmos_containers.py, with the same properties (one source of truth for each)."""

from __future__ import annotations

import json
from datetime import timedelta

from adapters.cosmos_containers import cosmos_layout
from bootstrap import cosmos_options
from config import Settings
from devhost.servicebus.config import QueueSettings, parse_config, parse_duration
from tests.infra.app_settings import expected_app_settings
from tests.infra.bicep import (
    APP,
    INFRA,
    ROOT,
    accessor_path,
    body,
    elements,
    load_json,
    load_json_path,
    loop_array,
    module,
    resolve,
)
from tests.infra.test_app_settings import service_bus_trigger_functions

SERVICE_BUS = APP / "servicebus.bicep"
COSMOS = APP / "cosmos.bicep"
EMULATOR_CONFIG = ROOT / "servicebus.config.json"

# ARM queue property -> (the emulator config's property, the local broker's setting).
QUEUE_PROPERTIES = {
    "lockDuration": ("LockDuration", "lock_duration"),
    "maxDeliveryCount": ("MaxDeliveryCount", "max_delivery_count"),
    "requiresDuplicateDetection": ("RequiresDuplicateDetection", "requires_duplicate_detection"),
    "duplicateDetectionHistoryTimeWindow": (
        "DuplicateDetectionHistoryTimeWindow",
        "duplicate_detection_window",
    ),
    "defaultMessageTimeToLive": ("DefaultMessageTimeToLive", "default_message_ttl"),
    "deadLetteringOnMessageExpiration": (
        "DeadLetteringOnMessageExpiration",
        "dead_lettering_on_message_expiration",
    ),
}


def queue_mapping() -> dict[str, tuple[str, object]]:
    """How the Bicep turns a queue's emulator Properties into ARM ones: (property, default)."""
    doc = module("servicebus")
    queues = doc["resources"]["queueResources"]
    assert loop_array(queues) == "queues"
    mapping: dict[str, tuple[str, object]] = {}
    for arm, expression in body(queues)["properties"].items():
        path = accessor_path(expression)
        assert path[:2] == ["queue", "Properties"], f"{arm} is not read from the config"
        last = path[2]
        if isinstance(last, dict):
            operands = last["operator"]["operands"]
            assert last["operator"]["type"] == "coalesce"
            mapping[arm] = (operands["operand_1"], operands["operand_2"])
        else:
            mapping[arm] = (last, None)
    return mapping


def local_reply_queues() -> list[str]:
    sample = json.loads((ROOT / "local.settings.sample.json").read_text(encoding="utf-8"))
    return [name.strip() for name in sample["Values"]["REPLY_QUEUES"].split(",") if name.strip()]


def emulator_queues() -> list[dict[str, object]]:
    document = json.loads(EMULATOR_CONFIG.read_text(encoding="utf-8"))
    return list(document["UserConfig"]["Namespaces"][0]["Queues"])


def arm_value_as_local(value: object) -> object:
    """An ARM queue property value in the local broker's terms."""
    if isinstance(value, str) and value.startswith("P"):
        return parse_duration(value)
    return value


def test_the_bicep_loads_the_repository_servicebus_config():
    doc = module("servicebus")
    loaded = resolve(doc, "emulatorConfig")["function"]["parameters"]["value"]
    assert load_json_path(SERVICE_BUS, loaded) == EMULATOR_CONFIG.resolve()


def test_every_property_the_config_uses_is_carried_to_azure():
    mapped = {emulator for emulator, _ in queue_mapping().values()}
    used = {name for queue in emulator_queues() for name in queue.get("Properties", {})}
    assert used <= mapped, f"servicebus.config.json uses {used - mapped}, infra drops them"
    assert set(queue_mapping()) == set(QUEUE_PROPERTIES)


def test_azure_queues_behave_as_the_local_broker_queues():
    """Each Azure queue, as the Bicep builds it, has the local broker's settings for it."""
    local = parse_config(json.loads(EMULATOR_CONFIG.read_text(encoding="utf-8")))
    mapping = queue_mapping()
    for queue in emulator_queues():
        properties = dict(queue.get("Properties", {}))  # type: ignore[call-overload]
        settings = local.settings_for(str(queue["Name"]))
        assert settings is not None
        for arm, (emulator, default) in mapping.items():
            value = properties.get(emulator, default)
            local_value = getattr(settings, QUEUE_PROPERTIES[arm][1])
            if value is None:
                assert local_value is None, f"{queue['Name']}.{arm}"
            else:
                assert arm_value_as_local(value) == local_value, f"{queue['Name']}.{arm}"


def test_bicep_defaults_are_the_local_broker_defaults():
    defaults = QueueSettings(name="any")
    for arm, (_, default) in queue_mapping().items():
        local_default = getattr(defaults, QUEUE_PROPERTIES[arm][1])
        if default is None:
            assert local_default is None, arm
        else:
            assert arm_value_as_local(default) == local_default, arm
    assert isinstance(defaults.lock_duration, timedelta)


def test_local_reply_queues_stay_local_and_shape_the_client_reply_queues():
    names = [str(queue["Name"]) for queue in emulator_queues()]
    assert local_reply_queues(), "local.settings.sample.json names no reply queue"
    assert set(local_reply_queues()) <= set(names)
    doc = module("servicebus")
    app_queues = resolve(doc, "appQueues")["function"]
    assert app_queues["type"] == "filter"
    assert "localReplyQueues" in json.dumps(app_queues)
    reply = resolve(doc, "clientReplyQueues")
    assert reply["loop_type"]["detail"]["array_name"] == "clientApps"
    assert accessor_path(reply["config"]["Name"]) == ["app", "replyQueue"]
    main = module("main")
    entry = resolve(main, "clientAppList")["config"]
    assert entry["replyQueue"].endswith("-replies")


def test_triggered_and_sent_queues_are_the_ones_the_code_uses():
    doc = module("servicebus")
    settings = expected_app_settings()

    def names(variable: str) -> set[str]:
        return {accessor_path(each)[1] for each in elements(doc, variable)}

    triggered = {name.strip("%") for name in service_bus_trigger_functions().values()}
    assert names("triggeredQueues") == triggered
    queue_settings = {name for name in settings if name.endswith("_QUEUE")}
    # The app sends to every queue it names, the orders queue too: the operator console
    # resubmits a dead letter to its source queue.
    assert names("appOwnQueues") == queue_settings
    configured = {str(queue["Name"]) for queue in emulator_queues()}
    for name in queue_settings:
        assert settings[name] in configured, f"{name}={settings[name]} is no configured queue"


def test_cosmos_containers_json_is_what_the_adapter_defines():
    layout = cosmos_layout(cosmos_options(Settings()))
    expected = {
        "database": layout.database,
        "containers": [each.to_document() for each in layout.containers],
    }
    assert json.loads((INFRA / "cosmos-containers.json").read_text(encoding="utf-8")) == expected, (
        "infra/cosmos-containers.json is out of date: "
        "python -m adapters.cosmos_containers > infra/cosmos-containers.json"
    )
    settings = expected_app_settings()
    assert settings["COSMOS_DATABASE"] == layout.database
    assert settings["COSMOS_STATE_CONTAINER"] == layout.state.name
    assert settings["COSMOS_ORDERS_CONTAINER"] == layout.orders.name
    assert settings["COSMOS_DEADLINE_INDEX_CONTAINER"] == layout.deadlines.name


def test_the_bicep_creates_each_container_exactly_as_defined():
    doc = module("cosmos")
    layout = load_json(COSMOS, resolve(doc, "layout"))
    assert load_json_path(COSMOS, resolve(doc, "layout")) == (INFRA / "cosmos-containers.json")
    containers = doc["resources"]["containers"]
    loop = containers["config"]["loop_type"]["detail"]
    assert accessor_path(loop["array_name"]) == ["layout", "containers"]
    item = loop["item_name"]
    assert body(containers)["properties"] == {"resource": item}, "rebuilt, not loaded"
    database = body(doc["resources"]["database"])
    assert accessor_path(database["name"]) == ["layout", "database"]
    assert layout["containers"]
