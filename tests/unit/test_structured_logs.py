"""Structured log records (C9): key=value lines with the correlation ids, and no personal data.

The app's records read ``event k=v ...`` through any handler. The ids come from the call or
from `correlated`, across ``asyncio.to_thread``. A real agent run over an order logs the
order's id and never its customer id, and no log call in the app's code passes anything
named after the customer.
"""

from __future__ import annotations

import ast
import asyncio
import io
import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from config import Settings
from domain.agent_messages import AgentOutcome, AgentRequest
from domain.contracts import Submission, parse_submission
from domain.policies import CircuitBreaker
from observability import logs
from order_agents.call_policy import run_agent
from order_agents.service_client import Done, RemoteResult, TransientFailure

ROOT = Path(__file__).resolve().parents[2]
APP_PACKAGES = ("activities", "adapters", "orchestrators", "order_agents", "services", "supervisor")
PAIR = re.compile(r'(\S+?)=("(?:[^"\\]|\\.)*"|\S+)')
T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)
CUSTOMER = "customer-4711"


def fields(line: str) -> dict[str, str]:
    return {key: value for key, value in PAIR.findall(line)}


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """Every record of the ``app`` loggers, through a handler with the structured format."""
    stream = io.StringIO()
    # The devhost's language worker prints records this way: the app owns no handler.
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("level=%(levelname)s logger=%(name)s %(message)s"))
    app = logging.getLogger("app")
    level = app.level
    app.addHandler(handler)
    app.setLevel(logging.DEBUG)
    yield stream
    app.removeHandler(handler)
    app.setLevel(level)


def test_a_record_is_one_key_value_line_with_the_correlation_ids(lines: io.StringIO) -> None:
    log = logs.get_logger("app.test")
    log.info("step started", instance_id="o-1:2", step="charge-payment", reason='a "b" = c')

    (line,) = lines.getvalue().splitlines()
    found = fields(line)
    assert found["level"] == "INFO"
    assert found["logger"] == "app.test"
    assert found["instance.id"] == "o-1:2"
    assert found["order.id"] == "o-1"
    assert found["attempt"] == "2"
    assert found["step"] == "charge-payment"
    assert found["reason"] == r'"a \"b\" = c"'
    assert " step started " in line


def test_the_ids_are_also_record_attributes_for_an_exporter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="app.test")
    logs.get_logger("app.test").info("order received", order_id="o-9", created=True)

    (record,) = caplog.records
    assert record.__dict__["order.id"] == "o-9"
    # `created` is a LogRecord attribute: the field keeps its value under another name.
    assert record.__dict__["sas.created"] is True
    assert record.__dict__[logs.FIELDS_ATTRIBUTE] == ("order.id", "sas.created")
    assert record.getMessage() == "order received order.id=o-9 created=true"


async def test_correlated_ids_reach_records_in_threads_the_block_awaits(
    lines: io.StringIO,
) -> None:
    log = logs.get_logger("app.test")
    with logs.correlated(instance_id="o-2:1", step="reserve-stock"):
        await asyncio.to_thread(log.warning, "slow store")
    log.warning("outside")

    inside, outside = lines.getvalue().splitlines()
    assert fields(inside)["order.id"] == "o-2"
    assert fields(inside)["step"] == "reserve-stock"
    assert "order.id" not in fields(outside)


def test_a_disabled_level_renders_nothing(lines: io.StringIO) -> None:
    """A hot path logs at INFO under a worker at ERROR: the call must stop at the level
    check, before any id or field is turned into text."""

    class Unrenderable:
        def __str__(self) -> str:
            raise AssertionError("a disabled record was rendered")

    logging.getLogger("app").setLevel(logging.ERROR)
    logs.get_logger("app.test").info("step begun", instance_id=Unrenderable(), step="x")
    logs.get_logger("app.test").warning("write superseded", attempt=2, write=Unrenderable())

    assert lines.getvalue() == ""


async def test_an_agent_run_logs_the_order_id_and_never_the_customer_id(
    lines: io.StringIO,
) -> None:
    body = json.dumps(
        {
            "schemaVersion": 1,
            "orderId": "o-7",
            "customerId": CUSTOMER,
            "items": [{"sku": "sku-1", "quantity": 1}],
            "currency": "EUR",
        }
    )
    submission = parse_submission(body, None, frozenset())
    assert isinstance(submission, Submission)
    request = AgentRequest(
        instance_id="o-7:1",
        step="charge-payment",
        order=submission.order,
        deadline=T0 + timedelta(minutes=5),
    )
    results: list[RemoteResult] = [TransientFailure("503 Service Unavailable"), Done("p-1")]

    async def call(timeout_seconds: float) -> RemoteResult:
        return results.pop(0)

    async def no_wait(seconds: float) -> None:
        return None

    response = await run_agent(
        request,
        call,
        CircuitBreaker(failure_threshold=5, reset_seconds=30, clock=lambda: 0.0),
        Settings().agent_policy,
        tries=2,
        now=lambda: T0,
        sleep=no_wait,
        jitter=lambda: 0.0,
    )

    assert response.outcome is AgentOutcome.SUCCEEDED
    (line,) = lines.getvalue().splitlines()
    assert fields(line)["order.id"] == "o-7"
    assert fields(line)["step"] == "charge-payment"
    assert CUSTOMER not in line


def _log_calls(tree: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"debug", "info", "warning", "error", "exception", "log"}
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "log"
        ):
            yield node


def test_no_log_call_of_the_app_passes_anything_about_the_customer() -> None:
    calls = 0
    for package in APP_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for call in _log_calls(ast.parse(path.read_text(encoding="utf-8"))):
                calls += 1
                source = ast.unparse(call).lower()
                assert "customer" not in source, f"{path.name}:{call.lineno}: {source}"
    assert calls > 10


def test_every_logger_of_the_app_is_under_app_so_one_name_selects_them_all() -> None:
    # One logger name selects the app's records for an exporter or a handler (the Azure
    # worker's PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME, or a handler on the "app" logger).
    names = []
    for package in (*APP_PACKAGES, "observability"):
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            names += re.findall(r'get_logger\("([^"]+)"\)|getLogger\("([^"]+)"\)', text)
    flat = [name for pair in names for name in pair if name]
    assert len(flat) >= 9
    assert all(name.startswith("app.") for name in flat), flat


def test_a_value_a_sender_set_cannot_forge_a_line_or_repaint_the_terminal(
    lines: io.StringIO,
) -> None:
    """A message id with a carriage return, U+2028, an ANSI escape and a right-to-left
    override stays on its record's one line, each such character written as an escape."""
    forged = "m-1\r\nlevel=ERROR forged\u2028\x1b[31mred\u202eevil"
    logs.get_logger("app.test").warning("submission dead-lettered", message_id=forged)

    (line,) = lines.getvalue().splitlines()
    assert 'message_id="m-1\\u000d\\nlevel=ERROR forged\\u2028\\u001b[31mred\\u202eevil"' in line
    assert not any(c in line for c in "\r\u2028\x1b\u202e")
