"""Steps declared as data: the default list, lookups and what a step list may hold (D6, C1)."""

from __future__ import annotations

import pytest

from domain.workflow import DEFAULT_ORDER_STEPS, UnknownStep, declaration, step_list


def test_the_default_workflow_reserves_charges_and_ships_in_that_order() -> None:
    assert DEFAULT_ORDER_STEPS == ("reserve-stock", "charge-payment", "ship-order")
    assert [(s.agent, s.action, s.compensation) for s in step_list(DEFAULT_ORDER_STEPS)] == [
        ("stock", "reserve", "release"),
        ("payment", "charge", "refund"),
        ("shipping", "ship", "cancel"),
    ]


def test_a_one_step_workflow_is_a_list_of_one() -> None:
    assert [s.name for s in step_list(["ship-order"])] == ["ship-order"]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ([], "at least one step"),
        (["reserve-stock", "reserve-stock"], "listed twice"),
        (["fly-order"], "unknown step 'fly-order'; the steps are reserve-stock, charge-payment"),
    ],
)
def test_a_bad_step_list_says_what_is_wrong(names: list[str], message: str) -> None:
    with pytest.raises(UnknownStep, match=message):
        step_list(names)


def test_a_declaration_is_found_by_name() -> None:
    assert declaration("charge-payment").agent == "payment"
