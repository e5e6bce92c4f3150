"""What `azd up` creates with no parameter set, as docs/deployment.md lists it:
one resource group, made by main.bicep at subscription scope, holding everything; a Flex
Consumption (FC1) plan whose function app runs as the identity module's user-assigned
identity; Service Bus Standard; Cosmos DB serverless. And only the repository's own modules:
a registry module cannot be restored offline, and neither checkov nor these tests see inside
it."""

from __future__ import annotations

import re

from tests.infra.bicep import (
    BICEP_FILES,
    INFRA,
    accessor_path,
    body,
    module,
    parse,
    resources_of_type,
)


def test_main_creates_the_resource_group_that_holds_everything():
    main = module("main")
    assert main["globals"]["scope"]["value"] == "subscription"
    groups = resources_of_type(main, "Microsoft.Resources/resourceGroups")
    assert set(groups) == set(main["resources"]) == {"rg"}, "main creates more than the group"
    assert not groups["rg"]["existing"], "the group must be created, not looked up"
    assert body(groups["rg"])["location"] == "location"
    for name, each in main["modules"].items():
        assert body(each)["scope"] == "rg", f"module {name} deploys outside the group"
    assert accessor_path(main["outputs"]["AZURE_RESOURCE_GROUP"]["value"]) == ["rg", "name"]


def test_the_function_app_runs_as_the_identity_module_s_user_assigned_identity():
    site = body(module("function")["resources"]["site"])
    assert site["identity"]["type"] == "UserAssigned"
    assert list(site["identity"]["userAssignedIdentities"]) == ["'${identityId}'"]
    main = module("main")
    assert main["modules"]["identity"]["detail"]["path"] == "app/identity.bicep"
    params = body(main["modules"]["functionApp"])["params"]
    assert accessor_path(params["identityId"]) == ["identity", "outputs", "id"]
    assert accessor_path(params["identityClientId"]) == ["identity", "outputs", "clientId"]
    identity = module("identity")
    (symbol,) = resources_of_type(identity, "Microsoft.ManagedIdentity/userAssignedIdentities")
    assert accessor_path(identity["outputs"]["id"]["value"]) == [symbol, "id"]


def test_the_plan_is_flex_consumption_fc1():
    doc = module("function")
    (plan,) = resources_of_type(doc, "Microsoft.Web/serverfarms")
    assert body(doc["resources"][plan])["sku"] == {"name": "FC1", "tier": "FlexConsumption"}
    site = body(doc["resources"]["site"])
    assert accessor_path(site["properties"]["serverFarmId"]) == [plan, "id"]


def test_service_bus_is_standard_unless_a_vnet_needs_premium():
    main = module("main")
    assert main["parameters"]["serviceBusSku"]["default"] == "Standard"
    assert main["parameters"]["vnetEnabled"]["default"] is False
    sku = body(main["modules"]["serviceBus"])["params"]["skuName"]
    assert sku["operator"]["operands"] == {
        "condition": "vnetEnabled",
        "true_value": "Premium",
        "false_value": "serviceBusSku",
    }
    namespace = body(module("servicebus")["resources"]["namespace"])["sku"]
    assert namespace["name"] == namespace["tier"] == "skuName"


def test_cosmos_db_is_serverless_by_default():
    main = module("main")
    assert main["parameters"]["cosmosServerless"]["default"] is True
    assert body(main["modules"]["cosmos"])["params"]["serverless"] == "cosmosServerless"
    cosmos = module("cosmos")
    assert cosmos["parameters"]["serverless"]["default"] is True
    account = body(cosmos["resources"]["account"])["properties"]["capabilities"]
    assert account["operator"]["operands"] == {
        "condition": "serverless",
        "true_value": [{"name": "EnableServerless"}],
        "false_value": [],
    }
    # Serverless takes no provisioned throughput on the database.
    options = body(cosmos["resources"]["database"])["properties"]["options"]
    assert options["operator"]["operands"]["condition"] == "serverless"
    assert options["operator"]["operands"]["true_value"] == {}


def test_every_module_is_a_local_file_of_infra_never_a_registry_module():
    registry = re.compile(r"""^\s*module\s+\w+\s+'(br[:/]|ts[:/])""", re.MULTILINE)
    for path in BICEP_FILES:
        for name, each in parse(path).get("modules", {}).items():
            assert each["type"] == "local", f"{path.name}: module {name} is {each['type']}"
            target = (path.parent / each["detail"]["path"]).resolve()
            assert target.is_relative_to(INFRA), f"{path.name}: module {name} is outside infra/"
        match = registry.search(path.read_text(encoding="utf-8"))
        assert match is None, f"{path.name}: {match.group(0) if match else ''}"
