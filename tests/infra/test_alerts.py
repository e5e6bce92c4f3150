"""Operator alerts and the app's telemetry on Azure (C9, E8, C2, C5, U5).

infra/app/alerts.bicep raises an alert for each condition an operator must act on - dead
letters on any queue, consumer lag on a queue the app consumes, orders in Error or
CompensationFailed, an old Pending order, supervisor give-ups - and e-mails the operators'
address when the deployment names one. The rules over the app's own metrics query the
instrument names observability/metrics.py declares, so a renamed instrument cannot silently
disarm an alert. The function app exports its
OpenTelemetry to Application Insights with the settings documented for Python on Flex
Consumption, authenticated as its identity.
"""

from __future__ import annotations

import json
import re

from config import Settings
from observability import metrics
from tests.infra.bicep import (
    APP,
    INFRA,
    ROOT,
    accessor_path,
    body,
    condition,
    load_json,
    module,
    resolve,
    resources_of_type,
)


def alerts_module() -> dict[str, object]:
    return dict(body(module("main")["modules"]["alerts"])["params"])


def metric_alert(name: str) -> dict[str, object]:
    """The properties of the metric alert `name` (its Bicep symbol) of alerts.bicep."""
    rules = resources_of_type(module("alerts"), "Microsoft.Insights/metricAlerts")
    return dict(body(rules[name])["properties"])


def app_alerts() -> dict[str, dict[str, object]]:
    doc = module("alerts")
    return {each["name"]: each for each in resolve(doc, "appMetricAlerts")}


def test_main_deploys_the_alerts_with_the_operators_address_and_the_age_threshold() -> None:
    params = alerts_module()
    assert params["alertEmail"] == "alertEmail"
    assert params["oldestPendingSeconds"] == "oldestPendingAlertSeconds"
    assert accessor_path(params["serviceBusNamespaceName"]) == ["serviceBus", "outputs", "name"]
    assert accessor_path(params["appInsightsName"]) == [
        "monitoring",
        "outputs",
        "appInsightsName",
    ]
    main = module("main")["parameters"]
    assert main["alertEmail"]["default"] == ""
    assert main["oldestPendingAlertSeconds"]["default"] == 900
    document = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))
    assert document["parameters"]["alertEmail"] == {"value": "${ALERT_EMAIL}"}


def test_the_action_group_e_mails_the_operators_when_an_address_is_given() -> None:
    doc = module("alerts")
    (name, group), *others = resources_of_type(doc, "Microsoft.Insights/actionGroups").items()
    assert not others
    assert condition(group) is not None  # no address, no action group
    (receiver,) = body(group)["properties"]["emailReceivers"]
    assert receiver["emailAddress"] == "alertEmail"
    assert receiver["useCommonAlertSchema"] is True
    assert resolve(doc, "metricActions")["operator"]["type"] == "conditional"
    rules = resources_of_type(doc, "Microsoft.Insights/metricAlerts")
    assert set(rules) == {"deadLetters", "consumerLag"}
    for rule in rules.values():
        assert body(rule)["properties"]["actions"] == "metricActions"
    for rule in resources_of_type(doc, "Microsoft.Insights/scheduledQueryRules").values():
        assert body(rule)["properties"]["actions"] == "logActions"
    assert name == "operators"


def test_any_dead_letter_on_any_queue_of_the_namespace_raises_an_alert() -> None:
    properties = metric_alert("deadLetters")
    assert [accessor_path(scope) for scope in properties["scopes"]] == [["namespace", "id"]]
    assert properties["targetResourceType"] == "Microsoft.ServiceBus/namespaces"
    (criterion,) = properties["criteria"]["allOf"]
    assert criterion["metricNamespace"] == "Microsoft.ServiceBus/namespaces"
    assert criterion["metricName"] == "DeadletteredMessages"
    assert (criterion["operator"], criterion["threshold"]) == ("GreaterThan", 0)
    assert criterion["dimensions"] == [
        {"name": "EntityName", "operator": "Include", "values": ["*"]}
    ]
    assert properties["enabled"] is True


def test_a_queue_the_app_consumes_with_more_active_messages_than_the_threshold_alerts() -> None:
    """Consumer lag (C5, C9): ActiveMessages of each consumed queue, split by EntityName,
    above the deployment's threshold; the queues are exactly Settings.consumed_queues."""
    doc = module("alerts")
    properties = metric_alert("consumerLag")
    assert [accessor_path(scope) for scope in properties["scopes"]] == [["namespace", "id"]]
    assert properties["targetResourceType"] == "Microsoft.ServiceBus/namespaces"
    assert properties["enabled"] is True
    (criterion,) = properties["criteria"]["allOf"]  # type: ignore[index]
    assert criterion["metricNamespace"] == "Microsoft.ServiceBus/namespaces"
    assert criterion["metricName"] == "ActiveMessages"
    assert (criterion["operator"], criterion["threshold"]) == ("GreaterThan", "consumerLagMessages")
    assert criterion["timeAggregation"] == "Average"
    (dimension,) = criterion["dimensions"]
    assert (dimension["name"], dimension["operator"]) == ("EntityName", "Include")
    settings = load_json(APP / "alerts.bicep", resolve(doc, "settings"))
    queues = {settings[accessor_path(each)[1]] for each in resolve(doc, dimension["values"])}
    assert queues == set(Settings.from_environ(settings).consumed_queues)
    assert doc["parameters"]["consumerLagMessages"]["default"] == 1000
    params = alerts_module()
    assert params["consumerLagMessages"] == "consumerLagAlertMessages"
    assert module("main")["parameters"]["consumerLagAlertMessages"]["default"] == 1000
    document = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))
    assert document["parameters"]["consumerLagAlertMessages"] == {
        "value": "${CONSUMER_LAG_ALERT_MESSAGES=1000}"
    }


def test_the_app_metric_alerts_query_the_instruments_the_app_declares() -> None:
    alerts = app_alerts()
    assert set(alerts) == {"orders-failed", "oldest-pending", "supervisor-giveups"}

    def queried(alert: dict[str, object]) -> set[str]:
        return set(re.findall(r'"(sas\.[a-z_.]+)"', str(alert["query"])))

    assert queried(alerts["orders-failed"]) == {
        metrics.ORDERS_FAILED,
        metrics.ORDERS_COMPENSATION_FAILED,
    }
    assert queried(alerts["oldest-pending"]) == {metrics.BACKLOG_OLDEST_PENDING_AGE}
    assert queried(alerts["supervisor-giveups"]) == {metrics.SUPERVISOR_GIVEUPS}
    assert alerts["orders-failed"]["threshold"] == 0
    assert alerts["supervisor-giveups"]["threshold"] == 0
    assert alerts["oldest-pending"]["threshold"] == "oldestPendingSeconds"
    for alert in alerts.values():
        assert str(alert["query"]).startswith("customMetrics | where name ")
        assert str(alert["query"]).endswith(("sum(valueSum)", "max(valueMax)"))


def test_the_log_alerts_watch_application_insights_every_five_minutes() -> None:
    doc = module("alerts")
    (rules,) = resources_of_type(doc, "Microsoft.Insights/scheduledQueryRules").values()
    properties = body(rules)["properties"]
    assert [accessor_path(scope) for scope in properties["scopes"]] == [["appInsights", "id"]]
    assert properties["evaluationFrequency"] == "PT5M"
    (criterion,) = properties["criteria"]["allOf"]
    assert criterion["operator"] == "GreaterThan"
    assert criterion["metricMeasureColumn"] == "measure"
    assert properties["enabled"] is True


def test_the_worker_exports_opentelemetry_to_application_insights_as_the_identity() -> None:
    settings = resolve(module("function"), "deploymentSettings")
    assert settings["PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"] == "true"
    assert settings["PYTHON_ENABLE_OPENTELEMETRY"] == "true"
    assert accessor_path(settings["APPLICATIONINSIGHTS_CONNECTION_STRING"]) == [
        "appInsights",
        "properties",
        "ConnectionString",
    ]
    assert settings["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"] == (
        "ClientId=${identityClientId};Authorization=AAD"
    )
    host = json.loads((ROOT / "host.json").read_text(encoding="utf-8"))
    assert host["telemetryMode"] == "OpenTelemetry"


def test_the_app_code_uses_the_opentelemetry_api_and_the_worker_finds_the_distro() -> None:
    """The app records through the API alone; the SDK and exporter come from the distro the
    worker imports on Azure (PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY), pinned with the app."""
    pins = (ROOT / "requirements.in").read_text(encoding="utf-8")
    for package in ("opentelemetry-api", "azure-monitor-opentelemetry"):
        assert re.search(rf"^{package}==\S+$", pins, re.MULTILINE), package
    packages = "activities adapters console domain observability orchestrators order_agents"
    app_sources = [
        path
        for package in (*packages.split(), "services", "supervisor")
        for path in (ROOT / package).rglob("*.py")
    ]
    assert app_sources
    for path in app_sources:
        text = path.read_text(encoding="utf-8")
        assert "opentelemetry.sdk" not in text, path
        assert "azure.monitor" not in text, path
