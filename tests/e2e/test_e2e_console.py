"""The operator console through the devhost: its HTTP functions and its CLI (E8, C1, C2, C4).

The real pipeline runs (embedded broker, simulated services, devhost with ``function_app``);
the console is called over HTTP with the devhost's function key, as on Azure. The simulated
services' fault rules put one order where an operator is needed: in Error (the stock service
refuses the reservation for good, once), running (the stock service hangs), or
CompensationFailed (the charge is declined and the first release refused).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from devhost.function_keys import FunctionKeys
from devhost.testing import eventually_true

from domain.dead_letters import resubmitted_message_id
from domain.records import ProcessState
from tests.e2e.e2e_helpers import (
    E2E,
    ORDERS,
    Delivered,
    compensation_began_at,
    order_body,
    running_pipeline,
    side_effects_against_compensation,
)
from tools.console_keys import LocalKeys, local_keys
from tools.demo.pipeline import REPOSITORY
from tools.simulators.services import FaultKind, FaultPlan, FaultRule

HTTP_TIMEOUT = aiohttp.ClientTimeout(total=20)
CLI_TIMEOUT_SECONDS = 60.0
# A step may take long enough for an operator to cancel it while it runs.
SLOW_STEPS = {"STEP_TIMEOUT_SECONDS": "60", "CLAIM_TIMEOUT_SECONDS": "60"}


def once(kind: FaultKind, order_id: str, operation: str) -> FaultRule:
    return FaultRule(kind, order_id=order_id, operation=operation, times=1)


def refused_once(order_id: str) -> dict[str, FaultPlan]:
    """The stock service refuses the order's first reservation for good: Error (E8)."""
    return {"stock": FaultPlan(rules=(once(FaultKind.PERMANENT, order_id, "reserve"),))}


def base_url(e2e: E2E) -> str:
    assert e2e.pipeline.host.http is not None
    return f"http://127.0.0.1:{e2e.pipeline.host.http.port}"


def function_key(e2e: E2E) -> str:
    keys = e2e.pipeline.host.keys
    assert keys is not None
    return keys.function


def operator_keys(e2e: E2E) -> LocalKeys:
    """The run's read and act keys of the console (tools/console_keys.py)."""
    return local_keys(e2e.pipeline.host.options.data_dir)


async def console(
    e2e: E2E,
    method: str,
    path: str,
    body: Any = None,
    *,
    key: str | None = "",
    operator: str | None = "",
) -> tuple[int, Any]:
    """One call to ``api/console{path}``; `key` "" means the devhost's function key, `operator`
    "" the run's act key; None sends no such key."""
    headers = {} if key is None else {"x-functions-key": key or function_key(e2e)}
    if operator is not None:
        headers["X-Console-Key"] = operator or operator_keys(e2e).act
    async with (
        aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session,
        session.request(
            method, f"{base_url(e2e)}/api/console{path}", json=body, headers=headers
        ) as response,
    ):
        text = await response.text()
        return response.status, json.loads(text) if text else None


def message_ids(timeline: dict[str, Any]) -> list[str]:
    """The ids of the status messages a timeline says the app owes the reply queue (R2)."""
    return [m["messageId"] for m in timeline["statusMessages"]["messages"]]


def deliveries(timeline: dict[str, Any]) -> list[str]:
    return [m["delivery"] for m in timeline["statusMessages"]["messages"]]


async def in_error(e2e: E2E, order_id: str) -> None:
    await e2e.submit(order_body(order_id), message_id=order_id)
    await e2e.wait_for_record(order_id, lambda r: r.process_state is ProcessState.ERROR, "in Error")
    await e2e.finished_instance(f"{order_id}:1")


async def test_e8_the_console_lists_shows_and_resubmits_and_a_second_operator_gets_409(
    tmp_path: Path,
) -> None:
    order = "o-console"
    async with running_pipeline(tmp_path, service_faults=refused_once(order)) as e2e:
        await in_error(e2e, order)

        for method, path in (
            ("GET", ""),
            ("GET", "/orders?state=Error"),
            ("GET", f"/orders/{order}"),
            ("POST", f"/orders/{order}/resubmit"),
        ):
            assert (await console(e2e, method, path, key=None))[0] == 401, path
            assert (await console(e2e, method, path, key="wrong"))[0] == 401, path

        status, listed = await console(e2e, "GET", "/orders?state=Error")
        assert status == 200
        assert [r["OrderID"] for r in listed["orders"]] == [order]
        assert (await console(e2e, "GET", "/orders?state=Nonsense"))[0] == 400
        assert (await console(e2e, "GET", "/orders/o-nobody"))[0] == 404

        status, timeline = await console(e2e, "GET", f"/orders/{order}")
        assert status == 200
        assert timeline["record"]["ProcessState"] == "Error"
        assert [s["State"] for s in timeline["steps"]] == ["Failed", "NotStarted", "NotStarted"]
        [attempt] = timeline["attempts"]
        assert attempt["instanceId"] == f"{order}:1"
        assert attempt["orchestration"]["runtimeStatus"] == "Completed"
        assert attempt["orchestration"]["history"]
        replies = await e2e.statuses(order, "failed")
        assert (
            message_ids(timeline)
            == [str(m.message_id) for m in replies]
            == [
                f"{order}:received:-",
                f"{order}:failed:1",
            ]
        )
        assert deliveries(timeline) == ["sent with the record's creation (S2)", "sent"]
        assert (await console(e2e, "POST", f"/orders/{order}/cancel", {}))[0] == 400

        etag = timeline["record"]["etag"]
        answers = await asyncio.gather(
            console(e2e, "POST", f"/orders/{order}/resubmit", {"etag": etag}),
            console(e2e, "POST", f"/orders/{order}/resubmit", {"etag": etag}),
        )
        assert sorted(status for status, _ in answers) == [200, 409]
        [lost] = [body for status, body in answers if status == 409]
        assert "another writer changed it" in lost["error"]

        record = await e2e.wait_for_record(
            order, lambda r: r.process_state is ProcessState.PROCESSED, "Processed"
        )
        assert (record.attempt, record.resubmits) == (2, 1)
        await e2e.finished_instance(f"{order}:2")
        later = await e2e.statuses(order, "completed")
        status, timeline = await console(e2e, "GET", f"/orders/{order}")
        assert status == 200
        # Everything the reply queue got: the record's (C10), and the `failed` of the attempt
        # the operator resubmitted, which its history shows.
        assert (
            message_ids(timeline)
            == [str(m.message_id) for m in replies + later]
            == [
                f"{order}:received:-",
                f"{order}:failed:1",
                f"{order}:in-progress:reserve-stock",
                f"{order}:in-progress:charge-payment",
                f"{order}:in-progress:ship-order",
                f"{order}:completed:2",
            ]
        )
        assert deliveries(timeline)[1:] == ["sent"] * 5
        assert "resubmitted 1 time(s)" in timeline["statusMessages"]["note"]


async def test_e8_a_read_key_looks_but_may_not_act_and_the_audit_names_the_key_that_acted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Reading and acting take different keys: the read key lists, shows and lists dead
    letters and gets 403 with the reason on every action; the act key resubmits, and the
    action's log line names the act key (not the key itself)."""
    caplog.set_level(logging.INFO, logger="app.console")
    order = "o-roles"
    async with running_pipeline(tmp_path, service_faults=refused_once(order)) as e2e:
        await in_error(e2e, order)
        keys = operator_keys(e2e)
        for method, path in (("GET", "/orders?state=Error"), ("POST", f"/orders/{order}/resubmit")):
            assert (await console(e2e, method, path, operator=None))[0] == 401, path
            assert (await console(e2e, method, path, operator="guess"))[0] == 401, path

        status, listed = await console(e2e, "GET", "/orders?state=Error", operator=keys.read)
        assert status == 200
        assert [r["OrderID"] for r in listed["orders"]] == [order]
        assert (await console(e2e, "GET", f"/orders/{order}", operator=keys.read))[0] == 200
        assert (await console(e2e, "GET", "/dead-letters/orders", operator=keys.read))[0] == 200
        for path, body in (
            (f"/orders/{order}/resubmit", {}),
            (f"/orders/{order}/cancel", {"reason": "not wanted"}),
            (f"/orders/{order}/retry-compensation", {}),
            ("/dead-letters/orders/1/discard", None),
        ):
            status, refused = await console(e2e, "POST", path, body, operator=keys.read)
            assert status == 403, path
            assert "local-read holds the read role" in refused["error"], path
        assert (await e2e.record(order)).process_state is ProcessState.ERROR  # type: ignore[union-attr]

        status, answer = await console(e2e, "POST", f"/orders/{order}/resubmit", operator=keys.act)
        assert status == 200
        assert answer["record"]["ProcessState"] == "Pending"

    audit = [r for r in caplog.records if r.getMessage().startswith("operator resubmitted")]
    assert [(r.by, r.getMessage().endswith("by=local-act")) for r in audit] == [  # type: ignore[attr-defined]
        ("local-act", True)
    ]
    assert not any(
        keys.act in r.getMessage() or keys.read in r.getMessage() for r in caplog.records
    )
    refusals = [r for r in caplog.records if r.getMessage().startswith("console call refused")]
    assert {r.by for r in refusals} >= {"local-read", None}  # type: ignore[attr-defined]


async def test_c1_an_operator_cancels_a_running_order_and_it_compensates(tmp_path: Path) -> None:
    order = "o-cancel"
    hang = {"stock": FaultPlan(rules=(once(FaultKind.HANG, order, "reserve"),))}
    async with running_pipeline(tmp_path, service_faults=hang, settings=SLOW_STEPS) as e2e:
        await e2e.submit(order_body(order), message_id=order)
        await e2e.wait_for_record(
            order, lambda r: r.current_step == "reserve-stock", "running reserve-stock"
        )

        status, cancelled = await console(
            e2e, "POST", f"/orders/{order}/cancel", {"reason": "customer withdrew"}
        )

        assert status == 202, cancelled
        assert (cancelled["superseded"], cancelled["instanceId"]) == (f"{order}:1", f"{order}:2")
        assert cancelled["compensationStarted"] is True
        record = await e2e.wait_for_record(
            order, lambda r: r.process_state is ProcessState.COMPENSATED, "Compensated"
        )
        assert record.last_error == "cancelled by an operator: customer withdrew"
        began_at = await compensation_began_at(e2e, order)
        assert side_effects_against_compensation(e2e.pipeline.services, order, began_at) == []
        superseded = await e2e.finished_instance(f"{order}:1")
        assert superseded.runtime_status.value == "Terminated"
        assert (await console(e2e, "POST", f"/orders/{order}/cancel", {"reason": "x"}))[0] == 409


async def test_e8_c1_an_operator_cancels_an_order_in_error_and_its_failed_step_is_undone(
    tmp_path: Path,
) -> None:
    """The stock service refused the reservation for good: Error. The operator gives the
    order up for good: the failed step is undone by its idempotency key (nothing was
    reserved, so the key is closed for good), the order ends Compensated, and the timeline
    lists the `failed` of attempt 1 and the `compensated` of attempt 2."""
    order = "o-cancel-error"
    async with running_pipeline(tmp_path, service_faults=refused_once(order)) as e2e:
        await in_error(e2e, order)

        status, cancelled = await console(
            e2e, "POST", f"/orders/{order}/cancel", {"reason": "customer withdrew"}
        )

        assert status == 202, cancelled
        assert (cancelled["superseded"], cancelled["instanceId"]) == (None, f"{order}:2")
        assert cancelled["toUndo"] == [{"index": 0, "step": "reserve-stock", "reference": None}]
        record = await e2e.wait_for_record(
            order, lambda r: r.process_state is ProcessState.COMPENSATED, "Compensated"
        )
        assert record.last_error == "cancelled by an operator: customer withdrew"
        [closed] = e2e.pipeline.services.tombstones("stock", order)
        assert (closed.idempotency_key, closed.attempt) == (f"{order}:reserve-stock", 2)
        assert e2e.pipeline.services.ledger_entries("stock", order) == []
        replies = await e2e.statuses(order, "compensated")
        await e2e.finished_instance(f"{order}:2")
        status, timeline = await console(e2e, "GET", f"/orders/{order}")
        assert status == 200
        assert (
            message_ids(timeline)
            == [str(m.message_id) for m in replies]
            == [f"{order}:received:-", f"{order}:failed:1", f"{order}:compensated:2"]
        )
        assert deliveries(timeline)[1:] == ["sent", "sent"]


async def test_c2_an_operator_retries_a_failed_compensation_until_it_compensates(
    tmp_path: Path,
) -> None:
    order = "o-undo"
    faults = {
        "payment": FaultPlan(
            rules=(FaultRule(FaultKind.PERMANENT, order_id=order, operation="charge"),)
        ),
        "stock": FaultPlan(rules=(once(FaultKind.PERMANENT, order, "release"),)),
    }
    async with running_pipeline(tmp_path, service_faults=faults) as e2e:
        await e2e.submit(order_body(order), message_id=order)
        await e2e.wait_for_record(
            order,
            lambda r: r.process_state is ProcessState.COMPENSATION_FAILED,
            "CompensationFailed",
        )
        status, listed = await console(e2e, "GET", "/orders?state=CompensationFailed")
        assert [r["OrderID"] for r in listed["orders"]] == [order]

        status, retried = await console(e2e, "POST", f"/orders/{order}/retry-compensation")

        assert status == 202, retried
        assert [u["step"] for u in retried["toUndo"]] == ["reserve-stock"]
        await e2e.wait_for_record(
            order, lambda r: r.process_state is ProcessState.COMPENSATED, "Compensated"
        )
        again = await console(e2e, "POST", f"/orders/{order}/retry-compensation")
        assert again[0] == 409
        await e2e.finished_instance(f"{order}:2")
        replies = await e2e.statuses(order, "compensated")
        status, timeline = await console(e2e, "GET", f"/orders/{order}")
        # The record is written before the status is sent, so the retry's `compensated` may
        # reach the queue before the `compensation-failed` that preceded it.
        assert message_ids(timeline) == [
            f"{order}:received:-",
            f"{order}:in-progress:reserve-stock",
            f"{order}:compensation-failed:1",
            f"{order}:compensated:2",
        ]
        assert sorted(message_ids(timeline)) == sorted(str(m.message_id) for m in replies)
        assert deliveries(timeline)[1:] == ["sent"] * 3


async def run_cli(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tools.console_cli",
        *args,
        cwd=REPOSITORY,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), CLI_TIMEOUT_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_e8_the_cli_lists_shows_and_resubmits_with_the_devhost_keys_file(
    tmp_path: Path,
) -> None:
    order = "o-cli"
    async with running_pipeline(tmp_path, service_faults=refused_once(order)) as e2e:
        await in_error(e2e, order)
        keys_file = str(tmp_path / "devhost" / "keys.json")
        assert FunctionKeys.read(tmp_path / "devhost").function == function_key(e2e)
        common = ("--url", base_url(e2e), "--keys-file", keys_file)

        code, out, _ = await run_cli(*common, "list", "--state", "Error")
        assert code == 0
        assert [r["OrderID"] for r in json.loads(out)["orders"]] == [order]
        code, out, _ = await run_cli(*common, "show", order)
        assert code == 0
        shown = json.loads(out)
        assert shown["attempts"][0]["instanceId"] == f"{order}:1"
        assert message_ids(shown) == [f"{order}:received:-", f"{order}:failed:1"]
        code, _, err = await run_cli("--url", base_url(e2e), "--keys-file", "none", "list")
        assert code == 1
        assert "unauthorized" in err
        code, _, err = await run_cli(*common, "show", "o-nobody")
        assert code == 4

        read_key = operator_keys(e2e).read
        code, _, err = await run_cli(*common, "--operator-key", read_key, "resubmit", order)
        assert code == 1
        assert "forbidden" in err
        code, out, _ = await run_cli(*common, "resubmit", order)
        assert code == 0
        assert json.loads(out)["record"]["ProcessState"] == "Pending"
        code, _, err = await run_cli(*common, "resubmit", order)
        assert code == 3
        assert "conflict" in err
        await e2e.wait_for_record(
            order, lambda r: r.process_state is ProcessState.PROCESSED, "Processed"
        )


async def dead_letters_of_orders(e2e: E2E, count: int) -> list[Delivered]:
    """The dead letters of the orders queue, once there are `count` (peeked, not taken)."""
    seen: list[Delivered] = []

    async def arrived() -> bool:
        seen[:] = await e2e.peek(ORDERS, dead_letters=True)
        return len(seen) >= count

    await eventually_true(arrived, f"{count} dead letter(s) on orders")
    return seen


async def test_dead_letters_are_triaged_once_each_through_http_and_the_cli(
    tmp_path: Path,
) -> None:
    """DLQ triage: invalid submissions are dead-lettered (S3); an operator lists them with
    reason and description, discards one - a second operator discarding it too gets 409 -
    and resubmits the other to the orders queue, where it is handled again."""
    async with running_pipeline(tmp_path) as e2e:
        for message_id in ("bad-1", "bad-2", "bad-3"):
            await e2e.submit("not json", message_id=message_id)
        await dead_letters_of_orders(e2e, 3)

        status, queues = await console(e2e, "GET", "/dead-letters")
        assert status == 200
        assert "orders" in queues["queues"]
        assert (await console(e2e, "GET", "/dead-letters/not-a-queue"))[0] == 404
        assert (await console(e2e, "GET", "/dead-letters/orders", key=None))[0] == 401
        status, listed = await console(e2e, "GET", "/dead-letters/orders")
        assert status == 200
        letters = listed["deadLetters"]
        assert [d["messageId"] for d in letters] == ["bad-1", "bad-2", "bad-3"]
        assert all(d["reason"] and d["description"] for d in letters)
        first, second, third = (d["sequenceNumber"] for d in letters)

        answers = await asyncio.gather(
            console(e2e, "POST", f"/dead-letters/orders/{first}/discard"),
            console(e2e, "POST", f"/dead-letters/orders/{first}/discard"),
        )
        assert sorted(status for status, _ in answers) == [200, 409]

        status, _ = await console(e2e, "POST", f"/dead-letters/orders/{second}/resubmit")
        assert status == 200
        assert (await console(e2e, "POST", f"/dead-letters/orders/{second}/resubmit"))[0] == 409
        # Still not JSON: handled again, and dead-lettered again as a new dead letter.
        again = await dead_letters_of_orders(e2e, 2)
        assert sorted(str(d.message_id) for d in again) == sorted(
            ["bad-3", resubmitted_message_id("bad-2", second)]
        )

        common = ("--url", base_url(e2e), "--keys-file", str(tmp_path / "devhost" / "keys.json"))
        code, out, _ = await run_cli(*common, "dead-letters", "list", "orders")
        assert code == 0
        assert third in [d["sequenceNumber"] for d in json.loads(out)["deadLetters"]]
        code, _, _ = await run_cli(*common, "dead-letters", "discard", "orders", str(third))
        assert code == 0
        code, _, err = await run_cli(*common, "dead-letters", "discard", "orders", str(third))
        assert code == 3
        assert "gone" in err


async def test_bad_input_gets_a_4xx_with_a_reason_never_a_500(tmp_path: Path) -> None:
    """An operator (or a script) sending what the console cannot use hears why: a cancel
    reason with a lone surrogate, a continuation token it never gave out, and a dead letter
    another operator holds; nothing changes."""
    order = "o-bad-input"
    async with running_pipeline(tmp_path) as e2e:
        await e2e.submit(order_body(order), message_id=order)
        # Finished and its outbox cleared: no write of the app's own may change it any more.
        before = await e2e.wait_for_record(
            order,
            lambda r: r.process_state is ProcessState.PROCESSED and r.owed is None,
            "Processed, outbox cleared",
        )

        status, answer = await console(
            e2e, "POST", f"/orders/{order}/cancel", {"reason": "lone \ud800 surrogate"}
        )
        assert status == 400, answer
        assert "reason" in answer["error"]
        assert await e2e.record(order) == before

        status, answer = await console(e2e, "GET", "/orders?state=Error&continuation=forged!")
        assert status == 400, answer
        assert "continuation" in answer["error"]

        await e2e.submit("not json", message_id="held")
        [letter] = await dead_letters_of_orders(e2e, 1)
        async with e2e.held_dead_letter(ORDERS) as sequence:
            status, answer = await console(e2e, "POST", f"/dead-letters/orders/{sequence}/discard")
        assert status == 409, answer
        assert letter.message_id == "held"
        assert len(await e2e.peek(ORDERS, dead_letters=True)) == 1
