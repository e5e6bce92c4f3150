"""Every role the app needs is assigned by its built-in GUID, on the narrowest resource, to
the one identity as a ServicePrincipal; nothing broader (no namespace-, group- or
subscription-wide data role, no Owner or Contributor); client apps get their own queues only
(R1)."""

from __future__ import annotations

import json

import pytest

from config import Settings
from tests.infra.bicep import (
    APP,
    BICEP_FILES,
    accessor_path,
    alternatives,
    body,
    condition,
    elements,
    function_call,
    load_json,
    loop_array,
    module,
    resolve,
)

ROLES = {
    "090c5cfd-751d-490a-894a-3ce6f1109419": "Azure Service Bus Data Owner",
    "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0": "Azure Service Bus Data Receiver",
    "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39": "Azure Service Bus Data Sender",
    "b7e6dc6d-f1e8-4753-8033-0f276bb0955b": "Storage Blob Data Owner",
    "974c5e8b-45b9-4653-ba55-5f855dd0fb88": "Storage Queue Data Contributor",
    "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3": "Storage Table Data Contributor",
    "0ad04412-c4d5-4796-b79c-f76d14c8d402": "Durable Task Data Contributor",
    "3913510d-42f4-4e42-8a64-420c390055eb": "Monitoring Metrics Publisher",
}
OWNER = "090c5cfd-751d-490a-894a-3ce6f1109419"
RECEIVER = "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0"
SENDER = "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39"

# (module, resource) -> (roles, scope, loop array, principal) of every assignment to the app.
APP_ASSIGNMENTS = {
    ("monitoring", "appPublishes"): ({"3913510d-42f4-4e42-8a64-420c390055eb"}, "appInsights", None),
    ("storage", "appBlobAccess"): ({"b7e6dc6d-f1e8-4753-8033-0f276bb0955b"}, "account", None),
    ("storage", "appQueueAccess"): ({"974c5e8b-45b9-4653-ba55-5f855dd0fb88"}, "account", None),
    ("storage", "appTableAccess"): ({"0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3"}, "account", None),
    ("dts", "appRunsTaskHub"): ({"0ad04412-c4d5-4796-b79c-f76d14c8d402"}, "taskHub", None),
    ("servicebus", "appReceives"): ({OWNER, RECEIVER}, "triggeredQueueRefs", "triggeredQueues"),
    ("servicebus", "appSends"): ({SENDER}, "sendOnlyQueueRefs", "sendOnlyQueues"),
}
CLIENT_ASSIGNMENTS = {
    ("servicebus", "clientReceivesReplies"): ({RECEIVER}, "clientReplyQueueRefs", "clientApps"),
    ("servicebus", "clientSendsOrders"): ({SENDER}, "ordersQueueRef", "clientApps"),
}
MODULES = ("monitoring", "storage", "dts", "servicebus", "cosmos", "function", "identity")


def assignments(name: str) -> dict[str, object]:
    doc = module(name)
    return {
        symbol: each
        for symbol, each in doc["resources"].items()
        if each["type"] == "Microsoft.Authorization/roleAssignments" and not each["existing"]
    }


def roles_of(name: str, assignment: object) -> set[str]:
    doc = module(name)
    definition = body(assignment)["properties"]["roleDefinitionId"]
    parameters = function_call(definition, "subscription_resource_id")
    assert parameters["resource_type"] == "Microsoft.Authorization/roleDefinitions"
    return {str(each) for each in alternatives(doc, parameters["resource_name_1"])}


def scope_symbol(assignment: object) -> str:
    scope = body(assignment)["scope"]
    if isinstance(scope, dict):
        return str(scope["operator"]["operands"]["operand_1"])
    return str(scope)


def test_every_role_assignment_is_known_and_expected():
    found = {(name, symbol) for name in MODULES for symbol in assignments(name)}
    deployer = {key for key in found if "deployer" in key[1]}
    assert found - deployer == set(APP_ASSIGNMENTS) | set(CLIENT_ASSIGNMENTS)
    for name, symbol in found:
        assignment = assignments(name)[symbol]
        assert roles_of(name, assignment) <= set(ROLES), f"{name}.{symbol}: unknown role"


@pytest.mark.parametrize(("key", "expected"), sorted(APP_ASSIGNMENTS.items()))
def test_each_app_role_has_its_guid_scope_and_the_identity(key, expected):
    name, symbol = key
    roles, scope, array = expected
    assignment = assignments(name)[symbol]
    assert roles_of(name, assignment) == roles
    assert scope_symbol(assignment) == scope
    assert loop_array(assignment) == array
    properties = body(assignment)["properties"]
    assert properties["principalId"] == "identityPrincipalId"
    assert properties["principalType"] == "ServicePrincipal"


def test_storage_queue_and_table_roles_only_with_the_azure_storage_backend():
    for symbol in ("appQueueAccess", "appTableAccess"):
        assert condition(assignments("storage")[symbol]) == "durableOnStorage"
    assert condition(assignments("storage")["appBlobAccess"]) is None


def test_service_bus_roles_are_per_queue_and_owner_only_when_scaling_by_length():
    doc = module("servicebus")
    assert alternatives(doc, "triggerRole") == [OWNER, RECEIVER]
    assert resolve(doc, "triggerRole")["operator"]["operands"]["condition"] == "scaleByQueueLength"
    for refs, array in (
        ("triggeredQueueRefs", "triggeredQueues"),
        ("sendOnlyQueueRefs", "sendOnlyQueues"),
        ("clientReplyQueueRefs", "clientApps"),
    ):
        ref = doc["resources"][refs]
        assert ref["existing"]
        assert ref["type"] == "Microsoft.ServiceBus/namespaces/queues"
        assert loop_array(ref) == array
    orders = body(doc["resources"]["ordersQueueRef"])
    assert accessor_path(orders["name"]) == ["settings", "ORDERS_QUEUE"]
    for symbol, each in assignments("servicebus").items():
        if "deployer" not in symbol:
            assert scope_symbol(each) != "namespace", f"{symbol} is namespace-wide"


def consumed_queues() -> set[str]:
    """Settings.consumed_queues at the deployed settings (infra/app-settings.json)."""
    doc = module("servicebus")
    settings = load_json(APP / "servicebus.bicep", resolve(doc, "settings"))
    return set(Settings.from_environ(settings).consumed_queues)


def queue_names(doc: object, variable: str) -> set[str]:
    """The queues an array of `settings.<NAME>_QUEUE` names, by the deployed settings."""
    settings = load_json(APP / "servicebus.bicep", resolve(doc, "settings"))
    return {settings[accessor_path(each)[1]] for each in elements(doc, variable)}


@pytest.mark.parametrize("scale_by_queue_length", [True, False])
def test_the_app_may_send_to_every_queue_it_consumes(scale_by_queue_length):
    """The console's dead-letter triage resubmits a dead letter to its source queue, any queue
    the app consumes (orders included): the app holds Data Sender on each, or Data Owner
    (which sends too) where scaling by queue length gives it Owner on its trigger queues."""
    doc = module("servicebus")
    consumed = consumed_queues()
    assert consumed == queue_names(doc, "triggeredQueues")
    assert consumed <= queue_names(doc, "appSentQueues")
    sent = function_call(resolve(doc, "sentQueues"), "concat")
    assert sent["arg_1"] == "appSentQueues"
    choice = resolve(doc, "sendOnlyQueues")["operator"]["operands"]
    assert choice["condition"] == "scaleByQueueLength"
    trigger_role = resolve(doc, "triggerRole")["operator"]["operands"]
    if scale_by_queue_length:
        assert resolve(doc, trigger_role["true_value"]) == OWNER
        # Owner on every trigger queue; the others the app sends to get Sender.
        kept_out = function_call(choice["true_value"], "filter")
        assert kept_out["input_array"] == "sentQueues"
        assert "triggeredQueues" in json.dumps(kept_out["expression"])
        roles = {queue: OWNER for queue in queue_names(doc, "triggeredQueues")}
    else:
        assert resolve(doc, trigger_role["false_value"]) == RECEIVER
        assert choice["false_value"] == "sentQueues"
        roles = {queue: SENDER for queue in queue_names(doc, "appSentQueues")}
    for queue in sorted(consumed):
        assert roles.get(queue) in (OWNER, SENDER), f"the app cannot resubmit to {queue}"
    assert roles_of("servicebus", assignments("servicebus")["appSends"]) == {SENDER}


@pytest.mark.parametrize(("key", "expected"), sorted(CLIENT_ASSIGNMENTS.items()))
def test_a_client_app_may_read_only_its_reply_queue_and_send_orders(key, expected):
    name, symbol = key
    roles, scope, array = expected
    assignment = assignments(name)[symbol]
    assert roles_of(name, assignment) == roles
    assert scope_symbol(assignment) == scope
    assert loop_array(assignment) == array
    principal = body(assignment)["properties"]["principalId"]
    assert accessor_path(principal) == ["app", "principalId"]


def test_deployer_roles_are_optional():
    for name in MODULES:
        for symbol, each in assignments(name).items():
            if "deployer" in symbol:
                assert "deployerPrincipalId" in json.dumps(condition(each)), symbol
                assert body(each)["properties"]["principalId"] == "deployerPrincipalId"


def test_cosmos_data_contributor_is_on_the_database_for_the_identity():
    doc = module("cosmos")
    assignment = body(doc["resources"]["appDataAccess"])["properties"]
    assert resolve(doc, "cosmosDataContributor") == "00000000-0000-0000-0000-000000000002"
    definition = "${account.id}/sqlRoleDefinitions/${cosmosDataContributor}"
    assert assignment["roleDefinitionId"] == definition
    assert assignment["scope"] == "${account.id}/dbs/${layout.database}"
    assert assignment["principalId"] == "identityPrincipalId"


def test_every_module_gets_the_identity_of_main():
    for name, each in module("main")["modules"].items():
        params = body(each)["params"]
        if "identityPrincipalId" in params:
            path = accessor_path(params["identityPrincipalId"])
            assert path == ["identity", "outputs", "principalId"], name


def test_no_owner_or_contributor_anywhere():
    for path in BICEP_FILES:
        text = path.read_text(encoding="utf-8").lower()
        assert "8e3af657-a8ff-443c-a75c-2fe8c4bcb635" not in text, f"{path}: Owner"
        assert "b24988ac-6180-42a0-ab88-20f7382dd24c" not in text, f"{path}: Contributor"
