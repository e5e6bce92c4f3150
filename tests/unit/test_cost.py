"""The cost model of the demo, chaos and bench runs, from fixed counts and the price table."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from devhost.durable.history import EventType

from tools import cost

HISTORY = cost.HistoryCounts(episodes=1_600, activities=800, dts_actions=2_400)
COUNTS = cost.RunCounts(
    orders=200,
    history=HISTORY,
    store_reads=230,
    store_writes=1_600,
    messages_sent=2_400,
    triggered=2_000,
    request_units=1_830.0,
)


def prices_with(dts_price: float | None) -> dict[str, Any]:
    prices = cost.load_prices()
    prices["per_order"]["dts_actions"]["price"] = dts_price
    return prices


def line_of(priced: cost.Cost, meter_key: str, prices: dict[str, Any]) -> cost.MeterCost:
    meter = prices["per_order"][meter_key]["meter"]
    return next(line for line in priced.lines if line.meter == meter)


def test_the_price_table_is_dated_names_its_currency_and_a_source_per_price() -> None:
    prices = json.loads(cost.PRICES.read_text(encoding="utf-8"))

    dt.date.fromisoformat(prices["as_of"])
    assert prices["currency"]
    assert set(prices["per_order"]) == set(cost.PER_ORDER_METERS)
    assert set(prices["monthly"]) == set(cost.MONTHLY_METERS)
    for group in ("per_order", "monthly"):
        for name, meter in prices[group].items():
            assert meter["source"].startswith("https://"), name
            assert meter["meter"], name
            assert meter["price"] is None or meter["price"] >= 0, name
    for name in cost.PER_ORDER_METERS:
        assert prices["per_order"][name]["per"] > 0, name
    estimates = prices["request_unit_estimates"]
    assert estimates["read"] > 0
    assert estimates["write"] > 0
    assert estimates["source"].startswith("https://")


def test_each_meter_of_1000_orders_is_its_count_scaled_and_priced_from_the_table() -> None:
    prices = prices_with(2.5)
    scale = 1000 / COUNTS.orders

    priced = cost.cost_of_orders(COUNTS, prices)

    def expected(key: str, quantity: float) -> float:
        meter = prices["per_order"][key]
        return float(meter["price"]) * quantity / float(meter["per"])

    estimates = prices["request_unit_estimates"]
    request_units = (230 * estimates["read"] + 1_600 * estimates["write"]) * scale
    quantities = {
        "cosmos_request_units": request_units,
        "servicebus_operations": 2_400 * cost.OPERATIONS_PER_MESSAGE * scale,
        "function_executions": (2_000 + 1_600 + 800) * scale,
        "dts_actions": 2_400 * scale,
    }
    for key, quantity in quantities.items():
        line = line_of(priced, key, prices)
        assert line.quantity == pytest.approx(quantity), key
        assert line.cost == pytest.approx(expected(key, quantity)), key
    assert priced.total == pytest.approx(sum(expected(k, q) for k, q in quantities.items()))
    assert priced.left_out == [prices["per_order"]["function_execution_time"]["meter"]]
    assert priced.as_of == prices["as_of"]
    assert priced.currency == prices["currency"]


def test_estimated_meters_say_so_and_the_measured_request_units_are_shown_beside() -> None:
    prices = prices_with(2.5)

    priced = cost.cost_of_orders(COUNTS, prices)

    request_units = line_of(priced, "cosmos_request_units", prices)
    assert request_units.basis.startswith("estimate")
    assert "9,150.0" in request_units.basis  # the run's 1,830 RU per 200 orders, per 1,000
    assert line_of(priced, "servicebus_operations", prices).basis.startswith("estimate")
    assert "from the histories" in line_of(priced, "dts_actions", prices).basis


def test_a_meter_without_a_price_is_left_out_of_the_total_and_named() -> None:
    prices = prices_with(None)

    priced = cost.cost_of_orders(COUNTS, prices)

    dts = line_of(priced, "dts_actions", prices)
    assert dts.cost is None
    assert dts.quantity == pytest.approx(2_400 * 1000 / COUNTS.orders)
    assert dts.meter in priced.left_out
    assert priced.total == pytest.approx(
        sum(line.cost for line in priced.lines if line.cost is not None)
    )
    shown = "\n".join(cost.render_section({"orders": priced.to_json(), "atRest": priced.to_json()}))
    assert "no price in the table" in shown
    totals = [line for line in shown.splitlines() if line.startswith("  total: ")]
    assert all(dts.meter in line for line in totals)


def test_a_count_the_run_could_not_take_is_said_and_left_out_of_the_total() -> None:
    prices = prices_with(2.5)
    counts = cost.RunCounts(orders=200, history=HISTORY, unmeasured="the app runs elsewhere")

    priced = cost.cost_of_orders(counts, prices)

    for key in ("cosmos_request_units", "servicebus_operations"):
        line = line_of(priced, key, prices)
        assert (line.quantity, line.cost) == (None, None), key
        assert line.basis == "not measured: the app runs elsewhere"
    executions = line_of(priced, "function_executions", prices)
    assert executions.quantity == pytest.approx((1_600 + 800) * 1000 / 200)
    assert "Service Bus-triggered executions not measured" in executions.basis
    assert priced.left_out == [
        prices["per_order"][key]["meter"]
        for key in ("cosmos_request_units", "servicebus_operations", "function_execution_time")
    ]
    shown = "\n".join(cost.render_section({"orders": priced.to_json(), "atRest": priced.to_json()}))
    assert "not measured: the app runs elsewhere" in shown


def test_the_cost_at_rest_prices_the_default_timers_and_the_fixed_monthly_charges() -> None:
    prices = cost.load_prices()
    schedules = {"EVERY_TWO_SECONDS_SCHEDULE": "*/2 * * * * *", "HOURLY_SCHEDULE": "0 0 * * * *"}

    month = cost.at_rest(prices, schedules)

    executions = prices["per_order"]["function_executions"]
    fired = {"EVERY_TWO_SECONDS_SCHEDULE": 43_200 * 730 / 24, "HOURLY_SCHEDULE": 730.0}
    for name, count in fired.items():
        line = next(line for line in month.lines if line.meter.endswith(name))
        assert line.quantity == pytest.approx(count)
        assert line.cost == pytest.approx(executions["price"] * count / executions["per"])
    fixed = [line for line in month.lines if line.basis == "fixed monthly charge"]
    assert {line.meter for line in fixed} == {
        prices["monthly"][name]["meter"] for name in cost.MONTHLY_METERS
    }
    assert month.total == pytest.approx(
        sum(executions["price"] * n / executions["per"] for n in fired.values())
        + sum(prices["monthly"][name]["price"] for name in cost.MONTHLY_METERS)
    )


def test_the_cost_at_rest_reads_the_schedules_of_the_deployment_settings() -> None:
    settings = json.loads(cost.APP_SETTINGS.read_text(encoding="utf-8"))

    schedules = cost.default_schedules()

    assert schedules
    assert schedules == {k: v for k, v in settings.items() if k.endswith("_SCHEDULE")}
    month = cost.at_rest()
    assert all(any(line.meter.endswith(name) for line in month.lines) for name in schedules)


def test_dts_actions_count_the_start_each_activity_twice_timers_fired_and_events() -> None:
    def event(kind: EventType) -> dict[str, Any]:
        return {"EventType": int(kind)}

    history = [
        event(EventType.ORCHESTRATOR_STARTED),
        event(EventType.EXECUTION_STARTED),
        event(EventType.TASK_SCHEDULED),
        event(EventType.TIMER_CREATED),
        event(EventType.ORCHESTRATOR_COMPLETED),
        event(EventType.ORCHESTRATOR_STARTED),
        event(EventType.TASK_COMPLETED),
        event(EventType.ORCHESTRATOR_COMPLETED),
        event(EventType.ORCHESTRATOR_STARTED),
        event(EventType.EVENT_RAISED),
        event(EventType.TIMER_FIRED),
        event(EventType.EXECUTION_COMPLETED),
        event(EventType.ORCHESTRATOR_COMPLETED),
    ]

    counts = cost.HistoryCounts.of([history, history])

    assert counts == cost.HistoryCounts(episodes=6, activities=2, dts_actions=10)
