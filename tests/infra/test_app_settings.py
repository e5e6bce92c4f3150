"""The function app gets every setting the code reads, each connection in its identity form,
and nothing Flex Consumption rejects or that would hold a secret (infra/app/function.bicep)."""

from __future__ import annotations

import ast
import json

from config import declarations
from tests.infra.app_settings import (
    APP_SETTINGS_JSON,
    LOCAL_ONLY,
    SET_BY_BICEP,
    expected_app_settings,
    render,
)
from tests.infra.bicep import APP as APP_DIR
from tests.infra.bicep import ROOT, body, function_call, load_json, module, resolve

FUNCTION = APP_DIR / "function.bicep"
LOCAL_SAMPLE = ROOT / "local.settings.sample.json"

# Flex Consumption plan deprecations (Functions app settings reference).
FLEX_REJECTED = frozenset(
    {
        "ENABLE_ORYX_BUILD",
        "FUNCTIONS_EXTENSION_VERSION",
        "FUNCTIONS_WORKER_RUNTIME",
        "FUNCTIONS_WORKER_RUNTIME_VERSION",
        "FUNCTIONS_MAX_HTTP_CONCURRENCY",
        "FUNCTIONS_WORKER_PROCESS_COUNT",
        "FUNCTIONS_WORKER_DYNAMIC_CONCURRENCY_ENABLED",
        "SCM_DO_BUILD_DURING_DEPLOYMENT",
        "WEBSITE_CONTENTAZUREFILECONNECTIONSTRING",
        "WEBSITE_CONTENTOVERVNET",
        "WEBSITE_CONTENTSHARE",
        "WEBSITE_DNS_SERVER",
        "WEBSITE_MAX_DYNAMIC_APPLICATION_SCALE_OUT",
        "WEBSITE_NODE_DEFAULT_VERSION",
        "WEBSITE_RUN_FROM_PACKAGE",
        "WEBSITE_SKIP_CONTENTSHARE_VALIDATION",
        "WEBSITE_VNET_ROUTE_ALL",
    }
)
IDENTITY_CONNECTIONS = ("AzureWebJobsStorage", "ServiceBusConnection", "CosmosConnection")


def function_doc():
    return module("function")


def settings_parts() -> tuple[dict[str, str], dict[str, object], dict[str, object]]:
    """The declared settings (JSON), the deployment's own, and the DTS ones, as in the Bicep."""
    doc = function_doc()
    union = function_call(body(doc["resources"]["appSettings"])["properties"], "union")
    assert list(union.values()) == ["declaredSettings", "deploymentSettings", "durableSettings"]
    declared = load_json(FUNCTION, resolve(doc, "declaredSettings"))
    return declared, resolve(doc, "deploymentSettings"), resolve(doc, "dtsSettings")


def all_settings(durable: str = "dtsSettings") -> dict[str, object]:
    declared, deployment, _ = settings_parts()
    return {**declared, **deployment, **resolve(function_doc(), durable)}


def test_app_settings_json_is_every_declared_setting_at_its_default():
    assert APP_SETTINGS_JSON.read_text(encoding="utf-8") == render(), (
        "infra/app-settings.json is out of date: run .venv/bin/python -m tests.infra.app_settings"
    )
    for each in declarations():
        text = expected_app_settings().get(each.name)
        if text is not None:
            assert each.parse(text, each.name) == each.default, each.name


def test_every_setting_the_code_declares_is_set_and_local_only_ones_are_not():
    settings = all_settings()
    for each in declarations():
        if each.name in LOCAL_ONLY:
            assert each.name not in settings
        else:
            assert each.name in settings, f"{each.name} is not set in Azure"


def test_every_setting_of_the_local_sample_is_set_in_its_azure_form():
    settings = all_settings()
    local = json.loads(LOCAL_SAMPLE.read_text(encoding="utf-8"))["Values"]
    for name in local:
        if name in LOCAL_ONLY or name in FLEX_REJECTED:
            continue
        identity_form = any(key.startswith(f"{name}__") for key in settings)
        assert name in settings or identity_form, f"{name} (local.settings.sample.json)"


def test_no_setting_flex_consumption_rejects():
    for durable in ("dtsSettings", "azureStorageSettings"):
        assert not FLEX_REJECTED & set(all_settings(durable))


def test_settings_set_by_bicep_come_from_main_parameters():
    deployment = settings_parts()[1]
    assert deployment["STATE_STORE"] == "cosmos"
    assert deployment["PYTHON_ISOLATE_WORKER_DEPENDENCIES"] == "1"  # requirements.txt pins
    assert set(SET_BY_BICEP) <= set(deployment)
    params = body(module("main")["modules"]["functionApp"])["params"]
    for name in ("STOCK_SERVICE_URL", "PAYMENT_SERVICE_URL", "SHIPPING_SERVICE_URL"):
        parameter = deployment[name]
        assert parameter in function_doc()["parameters"]
        assert params[parameter] == parameter, f"main.bicep does not pass {parameter}"
        assert parameter in module("main")["parameters"]
    assert deployment["REPLY_QUEUES"] == "replyQueues"
    assert function_call(params["replyQueues"], "join")["input_array"] == "replyQueueNames"


def test_every_connection_is_in_its_identity_form_with_the_one_identity():
    settings = all_settings()
    for connection in IDENTITY_CONNECTIONS:
        assert connection not in settings, f"{connection} would be a connection string"
        assert settings[f"{connection}__credential"] == "managedidentity"
        assert settings[f"{connection}__clientId"] == "identityClientId"
    assert settings["AZURE_CLIENT_ID"] == "identityClientId"
    assert settings["ServiceBusConnection__fullyQualifiedNamespace"] == "serviceBusNamespaceFqdn"
    assert settings["CosmosConnection__accountEndpoint"] == "cosmosEndpoint"
    assert settings["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"] == (
        "ClientId=${identityClientId};Authorization=AAD"
    )
    assert settings["DURABLE_TASK_SCHEDULER_CONNECTION_STRING"] == (
        "Endpoint=${dtsEndpoint};Authentication=ManagedIdentity;ClientID=${identityClientId}"
    )
    params = body(module("main")["modules"]["functionApp"])["params"]
    assert params["identityClientId"]["operator"]["operands"]["operand_1"] == "identity"


def test_host_storage_uses_queues_and_tables_only_with_the_azure_storage_backend():
    dts, storage = all_settings("dtsSettings"), all_settings("azureStorageSettings")
    assert "AzureWebJobsStorage__blobServiceUri" in dts
    for service in ("queue", "table"):
        assert f"AzureWebJobsStorage__{service}ServiceUri" not in dts
        assert f"AzureWebJobsStorage__{service}ServiceUri" in storage
    assert "DURABLE_TASK_SCHEDULER_CONNECTION_STRING" not in storage
    assert dts["TASKHUB_NAME"] == "taskHubName"


def test_no_setting_holds_a_secret():
    for durable in ("dtsSettings", "azureStorageSettings"):
        for name, value in all_settings(durable).items():
            text = json.dumps(value).lower()
            for secret in ("accountkey", "sharedaccesskey", "listkeys", "password", "secret"):
                assert secret not in text, f"{name} holds {secret}"


def service_bus_trigger_functions() -> dict[str, str]:
    """Every Service Bus-triggered function of the app: its name and queue_name argument."""
    found: dict[str, str] = {}
    for package in ("activities", "orchestrators", "order_agents", "supervisor"):
        for path in sorted((ROOT / package).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
                    continue
                for decorator in node.decorator_list:
                    if (
                        isinstance(decorator, ast.Call)
                        and isinstance(decorator.func, ast.Attribute)
                        and decorator.func.attr == "service_bus_queue_trigger"
                    ):
                        queue = next(k.value for k in decorator.keywords if k.arg == "queue_name")
                        assert isinstance(queue, ast.Constant)
                        found[node.name] = str(queue.value)
    return found


def test_always_ready_covers_the_durable_group_and_every_service_bus_function():
    doc = function_doc()
    assert set(resolve(doc, "serviceBusFunctions")) == set(service_bus_trigger_functions())
    assert resolve(doc, "alwaysReadyDurable")[0]["name"] == "durable"
    scale = body(doc["resources"]["site"])["properties"]["functionAppConfig"]["scaleAndConcurrency"]
    assert scale == {
        "instanceMemoryMB": "instanceMemoryMB",
        "maximumInstanceCount": "maximumInstanceCount",
        "alwaysReady": "alwaysReady",
    }
    assert doc["parameters"]["alwaysReadyInstances"]["default"] == 0
    assert module("main")["parameters"]["alwaysReadyInstances"]["default"] == 0


def test_the_runtime_is_python_3_11_and_deploys_from_blob_with_the_identity():
    config = body(function_doc()["resources"]["site"])["properties"]["functionAppConfig"]
    assert config["runtime"] == {"name": "python", "version": "3.11"}
    storage = config["deployment"]["storage"]
    assert storage["type"] == "blobContainer"
    assert storage["authentication"] == {
        "type": "UserAssignedIdentity",
        "userAssignedIdentityResourceId": "identityId",
    }
