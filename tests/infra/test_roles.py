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
    INFRA,
    Json,
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
        ("deployerQueueRefs", "deployerQueues"),
    ):
        ref = doc["resources"][refs]
        assert ref["existing"]
        assert ref["type"] == "Microsoft.ServiceBus/namespaces/queues"
        assert loop_array(ref) == array
    orders = body(doc["resources"]["ordersQueueRef"])
    assert accessor_path(orders["name"]) == ["settings", "ORDERS_QUEUE"]
    for symbol, each in assignments("servicebus").items():
        assert scope_symbol(each) != "namespace", f"{symbol} is namespace-wide"


def consumed_queues() -> set[str]:
    """Settings.consumed_queues at the deployed settings (infra/app-settings.json)."""
    doc = module("servicebus")
    settings = load_json(APP / "servicebus.bicep", resolve(doc, "settings"))
    return set(Settings.from_environ(settings).consumed_queues)


def queue_names(doc: Json, variable: Json) -> set[str]:
    """The queues an array of `settings.<NAME>_QUEUE` names, by the deployed settings; fails on
    any other item (a reply queue, a parameter)."""
    settings = load_json(APP / "servicebus.bicep", resolve(doc, "settings"))
    names = set()
    for each in elements(doc, variable):
        path = accessor_path(each)
        assert len(path) == 2, f"{each!r} is not a queue setting"
        assert path[0] == "settings", f"{each!r} is not a queue setting"
        names.add(settings[path[1]])
    return names


def reply_queue_suffix() -> str:
    """What main.bicep appends to a client app's name to name its reply queue ("-replies")."""
    template = resolve(module("main"), "clientAppList")["config"]["replyQueue"]
    suffix = str(template).rsplit("}", 1)[1]
    assert suffix, template
    return suffix


def referenced_queues(doc: Json, symbol: str) -> set[str]:
    """Every queue an `existing` queue reference of servicebus.bicep may name (all branches)."""
    ref = doc["resources"][symbol]
    kind = (ref["type"], ref["existing"])
    assert kind == ("Microsoft.ServiceBus/namespaces/queues", True), f"{symbol} is no queue"
    array = loop_array(ref)
    if array is None:
        return queue_names(doc, [body(ref)["name"]])
    return {name for each in alternatives(doc, array) for name in queue_names(doc, each)}


@pytest.mark.parametrize("scale_by_queue_length", [True, False])
def test_the_app_may_send_to_every_queue_it_consumes(scale_by_queue_length):
    """The console's dead-letter triage resubmits a dead letter to its source queue, any queue
    the app consumes (orders included): the app holds Data Sender on each, or Data Owner
    (which sends too) where scaling by queue length gives it Owner on its trigger queues."""
    doc = module("servicebus")
    consumed = consumed_queues()
    assert consumed == queue_names(doc, "triggeredQueues")
    assert consumed <= queue_names(doc, "appOwnQueues")
    sent = function_call(resolve(doc, "sentQueues"), "concat")
    assert sent["arg_1"] == "appOwnQueues"
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
        roles = {queue: SENDER for queue in queue_names(doc, "appOwnQueues")}
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
        doc = module(name)
        for symbol, each in assignments(name).items():
            if "deployer" in symbol:
                array = loop_array(each)
                guard = condition(each) if array is None else resolve(doc, array)
                assert "deployerPrincipalId" in json.dumps(guard), symbol
                if array is not None:
                    assert [] in alternatives(doc, array), f"{symbol}: no empty branch"
                assert body(each)["properties"]["principalId"] == "deployerPrincipalId"


def test_the_deployer_s_principal_type_follows_the_identity_that_deploys():
    """A service principal deploying (CI) gets its roles as a ServicePrincipal: ARM refuses a
    role assignment whose principalType differs from the principal's. azd's
    AZURE_PRINCIPAL_TYPE (User when unset) reaches every deployer assignment."""
    document = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))
    assert document["parameters"]["principalId"] == {"value": "${AZURE_PRINCIPAL_ID}"}
    assert document["parameters"]["principalType"] == {"value": "${AZURE_PRINCIPAL_TYPE=User}"}
    declared = module("main")["parameters"]["principalType"]
    (allowed,) = (d["argument"] for d in declared["decorators"] if d["type"] == "allowed")
    assert {"User", "ServicePrincipal"} <= set(allowed)

    typed = 0
    for name in MODULES:
        for symbol, each in assignments(name).items():
            if "deployer" in symbol:
                assert body(each)["properties"]["principalType"] == "deployerPrincipalType"
                typed += 1
    assert typed
    for name, each in module("main")["modules"].items():
        params = body(each)["params"]
        if "deployerPrincipalId" in params and name != "cosmos":
            assert params["deployerPrincipalType"] == "principalType", name
    # A Cosmos DB SQL role assignment has no principalType: the service resolves it.
    cosmos = module("cosmos")["resources"]["deployerDataAccess"]
    assert "principalType" not in body(cosmos)["properties"]


def test_the_deployer_reads_the_app_s_own_queues_and_no_other_r1():
    """An operator reads alerts and the dead letters of the queues the app consumes: Data
    Receiver on each of those queues (the dead-letter sub-queue is no scope of its own), and on
    nothing else, so a client's status messages stay private to it (R1)."""
    doc = module("servicebus")
    reads = assignments("servicebus")["deployerReads"]
    assert roles_of("servicebus", reads) == {RECEIVER}
    assert scope_symbol(reads) == "deployerQueueRefs"
    assert loop_array(reads) == loop_array(doc["resources"]["deployerQueueRefs"])
    alerts = Settings.from_environ(
        load_json(APP / "servicebus.bicep", resolve(doc, "settings"))
    ).operator_alerts_queue
    branches = [queue_names(doc, each) for each in alternatives(doc, loop_array(reads))]
    assert sorted(branches, key=len) == [set(), consumed_queues() | {alerts}]


def test_r1_no_principal_but_its_client_may_receive_from_a_reply_queue():
    """Every role that receives (Data Receiver, Data Owner) is either the i-th client's on the
    i-th reply queue, or on queues named by the app's settings, none of which can be a reply
    queue: the deployer, the app and the other clients cannot read a client's status messages.
    No receiving role is namespace-wide or outside the Service Bus module."""
    doc = module("servicebus")
    suffix = reply_queue_suffix()
    checked = []
    for name in MODULES:
        for symbol, each in assignments(name).items():
            if not roles_of(name, each) & {OWNER, RECEIVER}:
                continue
            assert name == "servicebus", f"{name}.{symbol} receives from Service Bus"
            scope = scope_symbol(each)
            checked.append(symbol)
            if scope == "clientReplyQueueRefs":
                loop = each["config"]["loop_type"]["detail"]
                ref = doc["resources"][scope]
                assert loop["array_name"] == loop_array(ref) == "clientApps"
                index = body(each)["scope"]["operator"]["operands"]["operand_2"]
                assert index == loop["index_name"], f"{symbol}: not the i-th reply queue"
                principal = body(each)["properties"]["principalId"]
                assert accessor_path(principal) == [loop["item_name"], "principalId"], symbol
                item = ref["config"]["loop_type"]["detail"]["item_name"]
                assert accessor_path(body(ref)["name"]) == [item, "replyQueue"]
                continue
            queues = referenced_queues(doc, scope)
            assert queues, symbol
            replies = {queue for queue in queues if queue.endswith(suffix)}
            assert not replies, f"{symbol} may receive from reply queues {replies}"
    assert {"appReceives", "clientReceivesReplies", "deployerReads"} <= set(checked)


def test_r1_the_app_may_send_to_every_client_reply_queue():
    """Data Sender for the app on each reply queue it lists in REPLY_QUEUES, with or without
    Data Owner on its trigger queues: the app's status messages reach every client (R2)."""
    doc = module("servicebus")
    replies = resolve(doc, "replyQueueNames")
    item = replies["loop_type"]["detail"]["item_name"]
    assert replies["loop_type"]["detail"]["array_name"] == "clientApps"
    assert accessor_path(replies["config"]) == [item, "replyQueue"]
    main = module("main")
    assert resolve(main, "replyQueueNames")["loop_type"]["detail"]["array_name"] == "clientAppList"
    assert body(main["modules"]["serviceBus"])["params"]["clientApps"] == "clientAppList"

    sends = assignments("servicebus")["appSends"]
    assert roles_of("servicebus", sends) == {SENDER}
    assert body(sends)["properties"]["principalId"] == "identityPrincipalId"
    assert loop_array(doc["resources"][scope_symbol(sends)]) == loop_array(sends)
    suffix = reply_queue_suffix()
    for branch in alternatives(doc, loop_array(sends)):
        if isinstance(branch, dict) and branch.get("function", {}).get("type") == "filter":
            # Only the queues the app is triggered by are kept out, and no reply queue is one.
            kept_out = function_call(branch, "filter")
            keep = kept_out["expression"]["detail"]
            negation = keep["expression"]["operator"]
            assert negation["type"] == "not"
            dropped = function_call(negation["operands"]["bool_value"], "contains")
            assert dropped["item_to_find"] == keep["var_1"]
            triggered = queue_names(doc, dropped["container"])
            assert not any(queue.endswith(suffix) for queue in triggered)
            branch = kept_out["input_array"]
        parts = function_call(resolve(doc, branch), "concat")
        assert "replyQueueNames" in parts.values(), f"{branch} leaves out the reply queues"


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


def test_the_deployer_is_the_smoke_test_s_client_with_a_reply_queue_of_its_own_r1():
    """The postdeploy smoke test runs as the deployer: main.bicep adds it, when given, as one
    more client app, so it gets Data Sender on the orders queue and Data Receiver on its own
    reply queue (which REPLY_QUEUES lists), and no other client's reply queue (R1). The
    deployment outputs that queue for azure.yaml's hook."""
    main = module("main")
    entries = function_call(resolve(main, "clientAppEntries"), "concat")
    assert set(entries.values()) == {"declaredClientAppEntries", "smokeClientEntries"}
    assert sorted(alternatives(main, "smokeClientEntries"), key=len) == [
        [],
        ["${smokeClientName}=${principalId}"],
    ]
    smoke = resolve(main, "smokeClientName")
    assert smoke == "smoke"
    reply_queue = f"{smoke}{reply_queue_suffix()}"
    output = main["outputs"]["SMOKE_REPLY_QUEUE"]["value"]["operator"]["operands"]
    assert function_call(output["condition"], "empty") == {"item_to_test": "principalId"}
    assert output["true_value"] == ""
    assert str(output["false_value"]).replace("${smokeClientName}", smoke) == reply_queue
    # Every entry, the smoke test's among them, becomes a client app with its two roles.
    assert resolve(main, "clientAppList")["loop_type"]["detail"]["array_name"] == "clientAppEntries"
