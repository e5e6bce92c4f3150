"""Azure gets exactly the queues of servicebus.config.json and the containers of
adapters/cosmos_containers.py, with the same properties (one source of truth for each)."""

from __future__ import annotations

import json
from datetime import timedelta

from devhost.servicebus.config import QueueSettings, parse_config, parse_duration

from adapters.cosmos_containers import cosmos_layout
from bootstrap import cosmos_options
from config import Settings
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


def queue_properties() -> dict[str, dict[str, object]]:
    """Each queue of servicebus.config.json by name: its Properties."""
    found: dict[str, dict[str, object]] = {}
    for queue in emulator_queues():
        found[str(queue["Name"])] = dict(queue.get("Properties", {}))  # type: ignore[call-overload]
    return found


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
    for name, properties in queue_properties().items():
        settings = local.settings_for(name)
        assert settings is not None
        for arm, (emulator, default) in mapping.items():
            value = properties.get(emulator, default)
            local_value = getattr(settings, QUEUE_PROPERTIES[arm][1])
            if value is None:
                assert local_value is None, f"{name}.{arm}"
            else:
                assert arm_value_as_local(value) == local_value, f"{name}.{arm}"


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
    # Each client's reply queue has the local reply queue's properties, whatever they are.
    assert accessor_path(reply["config"]["Properties"]) == ["replyQueueTemplate", "Properties"]
    template = resolve(doc, "replyQueueTemplate")["function"]
    assert template["type"] == "first"
    assert "localReplyQueues" in json.dumps(template)
    main = module("main")
    entry = resolve(main, "clientAppList")["config"]
    assert entry["replyQueue"].endswith("-replies")


def test_duplicate_detection_is_on_except_for_orders_e4_s3():
    """docs/architecture.md's rule ("Duplicate detection is on for the agent queues, the reply
    queues and the alerts queue, but deliberately off for `orders`"), in the file the local
    broker and Azure both take their queues from: stable message ids make resends harmless on
    those queues (E4), while on `orders` a conflicting resubmission under the same orderId
    would be dropped unseen instead of dead-lettered and alerted (S3)."""
    settings = Settings.from_environ(expected_app_settings())
    detecting = {
        *(settings.agent_queue(agent) for agent in ("stock", "payment", "shipping")),
        settings.agent_responses_queue,
        settings.operator_alerts_queue,
        *local_reply_queues(),
    }
    properties = queue_properties()
    assert set(properties) == detecting | {settings.orders_queue}, "a queue the rule misses"
    for name in sorted(detecting):
        assert properties[name].get("RequiresDuplicateDetection") is True, name
        window = properties[name].get("DuplicateDetectionHistoryTimeWindow")
        assert isinstance(window, str), name
        assert parse_duration(window) > timedelta(0), name
    assert properties[settings.orders_queue].get("RequiresDuplicateDetection", False) is False


def test_only_reply_queues_expire_their_messages_r2_s1():
    """A client's status messages expire (not into the dead-letter sub-queue, which counts
    towards the same queue size), so a client that stops reading cannot fill its queue until
    the app's sends fail; no queue the app consumes or alerts on expires a message, so a
    submission waits however long the app is down and deadlines stay the orchestrator's (E6).
    `orders` dead-letters what expires, which only a client's own message TTL can make happen."""
    settings = Settings.from_environ(expected_app_settings())
    for name, properties in sorted(queue_properties().items()):
        ttl = properties.get("DefaultMessageTimeToLive")
        if name in local_reply_queues():
            assert isinstance(ttl, str), f"{name}: status messages never expire"
            assert timedelta(days=1) <= parse_duration(ttl) <= timedelta(days=14), name
            assert properties.get("DeadLetteringOnMessageExpiration", False) is False, name
        else:
            assert ttl is None, f"{name} expires its messages"
    orders = queue_properties()[settings.orders_queue]
    assert orders.get("DeadLetteringOnMessageExpiration") is True


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
        "python -m tools.cosmos_containers > infra/cosmos-containers.json"
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
