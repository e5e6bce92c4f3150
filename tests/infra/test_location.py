"""The region a user picks is one where every service of the deployment exists: main.bicep's
`location` admits only regions that have the Flex Consumption plan, the Durable Task
Scheduler and serverless Cosmos DB, and azd offers exactly those (its `location` metadata),
so `azd provision` never stops halfway on a resource its region lacks. Every resource and
module takes that one parameter."""

from __future__ import annotations

import json

from tests.infra.bicep import BICEP_FILES, INFRA, Json, body, module, parse

# Each service's regions as its sources (named in main.bicep's comment) list them, restricted
# to the public regions this deployment has been checked against.
FLEX_CONSUMPTION = {
    "australiaeast", "australiasoutheast", "brazilsouth", "canadacentral", "centralindia",
    "centralus", "eastasia", "eastus", "eastus2", "francecentral", "germanywestcentral",
    "italynorth", "japaneast", "koreacentral", "northcentralus", "northeurope", "norwayeast",
    "southafricanorth", "southcentralus", "southeastasia", "southindia", "spaincentral",
    "swedencentral", "uaenorth", "uksouth", "ukwest", "westcentralus", "westeurope", "westus",
    "westus2", "westus3",
}  # fmt: skip
DURABLE_TASK_SCHEDULER = {
    "australiaeast", "eastasia", "eastus", "eastus2", "northeurope", "southcentralus",
    "southeastasia", "swedencentral", "uksouth", "westus2",
}  # fmt: skip


def decorator(parameter: Json, kind: str) -> Json:
    (argument,) = (each["argument"] for each in parameter["decorators"] if each["type"] == kind)
    return argument


def test_the_location_admits_only_regions_with_every_service():
    location = module("main")["parameters"]["location"]
    allowed = decorator(location, "allowed")
    assert allowed, "no allow-list"
    assert len(set(allowed)) == len(allowed)
    assert set(allowed) <= FLEX_CONSUMPTION & DURABLE_TASK_SCHEDULER
    assert decorator(location, "metadata") == {"azd": {"type": "location"}}
    assert location["default"] is None, "azd asks for the region; no default"


def test_azd_s_region_is_the_location_and_every_resource_takes_it():
    document = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))
    assert document["parameters"]["location"] == {"value": "${AZURE_LOCATION}"}
    main = module("main")
    for name, each in main["modules"].items():
        declared = module(each["detail"]["path"].removeprefix("app/").removesuffix(".bicep"))
        if "location" in declared["parameters"]:
            assert body(each)["params"].get("location") == "location", name
    for path in BICEP_FILES:
        for name, each in parse(path)["resources"].items():
            if each["existing"]:
                continue
            place = body(each).get("location")
            assert place is None or place in ("location", "global"), f"{path.name}: {name}"
