"""The operator console on Azure (E8, C2): App Service authentication with Entra ID in front
of the function app when the deployment names the console's app registration, and the
function key still required behind it.

infra/app/function.bicep deploys `authsettingsV2` only when consoleAuthClientId is set: every
request then needs an Entra ID session or token for that registration (401 otherwise), from
a member of the operators' group or one of the listed principals; the Durable Functions HTTP
API stays reachable with its system key, so the durable extension keeps working. Without the
parameter nothing is deployed and the console relies on function keys alone.
"""

from __future__ import annotations

import ast
import json

import azure.functions as func

from console import functions as console_functions
from tests.infra.bicep import INFRA, ROOT, accessor_path, body, condition, module, resolve

APP_PACKAGES = ("activities", "console", "orchestrators", "order_agents", "supervisor")


def console_auth() -> dict[str, object]:
    resource = module("function")["resources"]["consoleAuth"]
    assert resource["type"] == "Microsoft.Web/sites/config"
    assert not resource["existing"]
    return dict(body(resource))


def http_routes() -> dict[str, str]:
    """Every HTTP-triggered function of the app: its route and the name of its auth level."""
    found: dict[str, str] = {}
    paths = [ROOT / "function_app.py"]
    for package in APP_PACKAGES:
        paths.extend(sorted((ROOT / package).glob("*.py")))
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and isinstance(decorator.func, ast.Attribute)
                    and decorator.func.attr == "route"
                ):
                    keywords = {k.arg: k.value for k in decorator.keywords}
                    route = keywords["route"]
                    assert isinstance(route, ast.Constant), node.name
                    found[str(route.value)] = ast.unparse(keywords.get("auth_level", ast.Name("")))
    return found


def test_easy_auth_is_deployed_only_with_the_console_app_registration():
    doc = module("function")
    resource = doc["resources"]["consoleAuth"]
    assert condition(resource) == "consoleAuthEnabled"
    enabled = resolve(doc, "consoleAuthEnabled")
    assert enabled["operator"]["type"] == "not"
    assert "consoleAuthClientId" in json.dumps(enabled)
    assert doc["parameters"]["consoleAuthClientId"]["default"] == ""
    auth = console_auth()
    assert auth["name"] == "authsettingsV2"
    assert auth["parent"] == "site"
    assert auth["properties"]["platform"] == {"enabled": True}  # type: ignore[index]


def test_every_unauthenticated_call_gets_401_and_https_is_required():
    properties = console_auth()["properties"]
    validation = properties["globalValidation"]  # type: ignore[index]
    assert validation["requireAuthentication"] is True
    assert validation["unauthenticatedClientAction"] == "Return401"
    assert properties["httpSettings"] == {"requireHttps": True}  # type: ignore[index]


def test_only_the_durable_http_api_is_excluded_and_it_keeps_its_system_key():
    doc = module("function")
    validation = console_auth()["properties"]["globalValidation"]  # type: ignore[index]
    excluded = resolve(doc, validation["excludedPaths"])
    assert excluded == ["/runtime/webhooks/durabletask"]
    routes = http_routes()
    assert routes, "the app has no HTTP function"
    for route in routes:
        assert not any(f"/api/{route}".startswith(path) for path in excluded), route


def test_tokens_of_the_console_registration_from_this_tenant_and_the_operators_only():
    provider = console_auth()["properties"]["identityProviders"]["azureActiveDirectory"]  # type: ignore[index]
    assert provider["enabled"] is True
    registration = provider["registration"]
    assert registration["clientId"] == "consoleAuthClientId"
    issuer = registration["openIdIssuer"]
    assert "${tenant().tenantId}/v2.0" in issuer
    assert issuer.startswith("${environment().authentication.loginEndpoint}")
    assert "clientSecretSettingName" not in registration, "browser sign-in needs no secret"
    validation = provider["validation"]
    assert validation["allowedAudiences"] == ["api://${consoleAuthClientId}", "consoleAuthClientId"]
    principals = validation["defaultAuthorizationPolicy"]["allowedPrincipals"]
    assert principals == {
        "groups": "consoleOperatorGroupIds",
        "identities": "consoleOperatorPrincipalIds",
    }


def test_main_passes_the_registration_the_group_and_the_principals():
    main = module("main")
    params = body(main["modules"]["functionApp"])["params"]
    assert params["consoleAuthClientId"] == "consoleAuthClientId"
    assert params["consoleOperatorGroupIds"] == "consoleOperatorGroupIds"
    assert params["consoleOperatorPrincipalIds"] == "consoleOperatorPrincipalIdList"
    group = resolve(main, "consoleOperatorGroupIds")["operator"]["operands"]
    assert group["true_value"] == []  # no group given, no group allowed
    assert "consoleOperatorsGroupId" in json.dumps(group["false_value"])
    listed = resolve(main, "consoleOperatorPrincipalIdList")
    assert listed["loop_type"]["type"] == "array"
    assert "consoleOperatorPrincipalIds" in json.dumps(listed["loop_type"]["detail"])
    for name in ("consoleAuthClientId", "consoleOperatorsGroupId", "consoleOperatorPrincipalIds"):
        assert main["parameters"][name]["default"] == "", name
    document = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))
    assert document["parameters"]["consoleAuthClientId"] == {"value": "${CONSOLE_AUTH_CLIENT_ID}"}
    assert document["parameters"]["consoleOperatorsGroupId"] == {
        "value": "${CONSOLE_OPERATORS_GROUP_ID}"
    }
    assert document["parameters"]["consoleOperatorPrincipalIds"] == {
        "value": "${CONSOLE_OPERATOR_PRINCIPAL_IDS}"
    }
    outputs = main["outputs"]
    # The CLI's CONSOLE_URL: the app's URL, which `azd env get-values` prints.
    assert outputs["CONSOLE_URL"]["value"] == "https://${functionApp.outputs.defaultHostName}"
    assert accessor_path(outputs["CONSOLE_AUTH_ENABLED"]["value"]) == [
        "functionApp",
        "outputs",
        "consoleAuthEnabled",
    ]


def test_the_function_key_is_still_required_behind_entra_id():
    assert console_functions.AUTH == func.AuthLevel.FUNCTION
    routes = http_routes()
    assert {route for route in routes if route.startswith("console")} == set(routes)
    assert set(routes.values()) == {"AUTH"}, routes


def test_e8_the_app_trusts_the_principal_header_only_where_easy_auth_is_deployed():
    """CONSOLE_AUTH is easyauth exactly when authsettingsV2 is deployed: without App Service
    authentication in front, any client could write X-MS-CLIENT-PRINCIPAL. The named keys
    come from the consoleKeys parameter, hashes only."""
    doc = module("function")
    settings = resolve(doc, "deploymentSettings")
    chosen = settings["CONSOLE_AUTH"]["operator"]
    assert chosen["type"] == "conditional"
    assert chosen["operands"]["condition"] == "consoleAuthEnabled"
    assert chosen["operands"]["true_value"] == "easyauth"
    assert chosen["operands"]["false_value"] == "keys"
    assert settings["CONSOLE_KEYS"] == "consoleKeys"
    main = module("main")
    assert body(main["modules"]["functionApp"])["params"]["consoleKeys"] == "consoleKeys"
    assert main["parameters"]["consoleKeys"]["default"] == ""
    document = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))
    assert document["parameters"]["consoleKeys"] == {"value": "${CONSOLE_KEYS}"}
