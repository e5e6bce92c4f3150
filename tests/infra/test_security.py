"""Our own checks where checkov has none for Bicep: local auth off on every service, TLS 1.2,
no public blob access, no key fetched anywhere (listKeys), private endpoints when asked."""

from __future__ import annotations

import re

from tests.infra.bicep import BICEP_FILES, INFRA, alternatives, body, module


def properties(name: str, symbol: str) -> dict[str, object]:
    return dict(body(module(name)["resources"][symbol])["properties"])


def test_local_auth_is_off_everywhere():
    assert properties("servicebus", "namespace")["disableLocalAuth"] is True
    assert properties("cosmos", "account")["disableLocalAuth"] is True
    assert properties("cosmos", "account")["disableKeyBasedMetadataWriteAccess"] is True
    assert properties("monitoring", "appInsights")["DisableLocalAuth"] is True
    assert properties("monitoring", "workspace")["features"] == {"disableLocalAuth": True}
    storage = properties("storage", "account")
    assert storage["allowSharedKeyAccess"] is False
    assert storage["defaultToOAuthAuthentication"] is True


def test_tls_1_2_is_the_floor():
    assert properties("servicebus", "namespace")["minimumTlsVersion"] == "1.2"
    assert properties("cosmos", "account")["minimalTlsVersion"] == "Tls12"
    assert properties("storage", "account")["minimumTlsVersion"] == "TLS1_2"
    assert properties("storage", "account")["supportsHttpsTrafficOnly"] is True
    site = properties("function", "site")
    assert site["httpsOnly"] is True
    assert site["siteConfig"]["minTlsVersion"] == "1.2"  # type: ignore[index]


def test_no_public_blob_access():
    assert properties("storage", "account")["allowBlobPublicAccess"] is False
    container = module("storage")["resources"]["account__blobs__deploymentContainer"]
    assert container["type"] == "Microsoft.Storage/storageAccounts/blobServices/containers"
    assert body(container)["properties"] == {"publicAccess": "None"}


def test_no_key_is_fetched_or_written_anywhere():
    forbidden = re.compile(
        r"listKeys|listConnectionStrings|listAccountSas|listServiceSas|AccountKey|"
        r"SharedAccessKey|primaryKey|secondaryKey|@secure\(\)",
        re.IGNORECASE,
    )
    comment = re.compile(r"^\s*//.*$", re.MULTILINE)
    for path in [*BICEP_FILES, *INFRA.glob("*.json")]:
        match = forbidden.search(comment.sub("", path.read_text(encoding="utf-8")))
        assert match is None, f"{path.name}: {match.group(0) if match else ''}"


def test_private_endpoints_and_no_public_access_with_vnet_enabled():
    main = module("main")
    assert main["parameters"]["vnetEnabled"]["default"] is False
    assert main["modules"]["network"]["config"]["condition"] == "vnetEnabled"
    service_bus = body(main["modules"]["serviceBus"])["params"]["skuName"]
    assert service_bus["operator"]["operands"]["true_value"] == "Premium"
    guarded = (("storage", "account"), ("servicebus", "namespace"), ("cosmos", "account"))
    for name, symbol in guarded:
        access = properties(name, symbol)["publicNetworkAccess"]
        assert access["operator"]["operands"] == {  # type: ignore[index]
            "condition": "vnetEnabled",
            "true_value": "Disabled",
            "false_value": "Enabled",
        }, name
    network = module("network")
    groups = {str(each["groupId"]) for each in network["variables"]["blobEndpoint"]["value"]}
    groups |= {str(each["groupId"]) for each in network["variables"]["messagingEndpoints"]["value"]}
    assert groups == {"blob", "namespace", "Sql"}
    subnets = body(network["resources"]["vnet"])["properties"]["subnets"]
    app = next(each for each in subnets if each["name"] == "app")
    delegation = app["properties"]["delegations"][0]["properties"]["serviceName"]
    assert delegation == "Microsoft.App/environments"


def test_the_durable_task_scheduler_is_reached_with_identity():
    dts = properties("dts", "scheduler")
    assert dts["sku"] == {"name": "Consumption"}
    main = module("main")
    assert main["modules"]["dts"]["config"]["condition"] == "useDts"
    assert alternatives(main, "useDts")
