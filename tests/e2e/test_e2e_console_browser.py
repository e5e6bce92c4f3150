"""The operator console's page in a real browser against the devhost (E8).

Headless Chromium (Debian's ``chromium``, driven by ``playwright-core`` from npm through
``console_browser.mjs``) opens ``api/console?code=<function key>#key=<act key>`` of a devhost
running the app, lists the orders in Error, opens one, clicks Resubmit and sees its state
change (the order then completes), and discards a dead letter of the orders queue. ``make setup``
installs chromium; under CI (CI=true) a missing browser fails the test rather than skipping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devhost.testing import eventually_true

from domain.records import ProcessState
from tests.e2e.e2e_helpers import ORDERS, order_body, running_pipeline
from tests.support.browser import chromium_path, run_browser_script
from tools.console_keys import local_keys
from tools.simulators.services import FaultKind, FaultPlan, FaultRule

SCRIPT = Path(__file__).with_name("console_browser.mjs")
BROWSER_TIMEOUT_SECONDS = 120.0


async def drive(
    page_url: str, order_id: str, browser: str, profile: Path, dead_message_id: str
) -> dict[str, Any]:
    return await run_browser_script(
        SCRIPT,
        page_url,
        order_id,
        browser,
        str(profile),
        dead_message_id,
        seconds=BROWSER_TIMEOUT_SECONDS,
    )


async def test_e8_an_operator_resubmits_an_order_from_the_page_and_sees_it_change(
    tmp_path: Path,
) -> None:
    browser = chromium_path()
    order = "o-page"
    refused = FaultRule(FaultKind.PERMANENT, order_id=order, operation="reserve", times=1)
    async with running_pipeline(
        tmp_path, service_faults={"stock": FaultPlan(rules=(refused,))}
    ) as e2e:
        await e2e.submit(order_body(order), message_id=order)
        await e2e.submit("not json", message_id="bad-page")
        await e2e.wait_for_record(order, lambda r: r.process_state is ProcessState.ERROR, "Error")
        await e2e.finished_instance(f"{order}:1")
        host = e2e.pipeline.host
        assert host.http is not None
        assert host.keys is not None
        act_key = local_keys(host.options.data_dir).act
        page_url = (
            f"http://127.0.0.1:{host.http.port}/api/console?code={host.keys.function}#key={act_key}"
        )
        profile = tmp_path / "chromium-profile"
        profile.mkdir()

        async def dead_lettered() -> bool:
            return bool(await e2e.peek(ORDERS, dead_letters=True))

        await eventually_true(dead_lettered, "the invalid submission dead-lettered")

        seen = await drive(page_url, order, browser, profile, "bad-page")

        assert seen["listed"] == [order, "Error"]
        assert seen["before"] == "Error"
        attempts = seen["attempts"]
        assert isinstance(attempts, list)
        assert len(attempts) == 1
        assert str(attempts[0]).startswith(f"{order}:1Completed")
        assert "order_workflow" in str(seen["history"])
        # Status, step, attempt, message id, follows, delivery, sent by (R2).
        shown = seen["statusMessages"]
        assert isinstance(shown, list)
        assert [row[:4] + row[5:6] for row in shown] == [
            ["received", "", "", f"{order}:received:-", "sent with the record's creation (S2)"],
            ["failed", "", "1", f"{order}:failed:1", "sent"],
        ]
        assert seen["message"] == f"resubmit of {order} done: now Pending"
        assert seen["after"] in {"Pending", "Processing", "Processed"}
        assert seen["stillListed"] == 0
        assert seen["deadLetter"] == ["bad-page", "", "InvalidMessage"]
        assert str(seen["dlqMessage"]).startswith("discard of dead letter ")
        assert seen["deadLettersLeft"] == 0
        assert await e2e.peek(ORDERS, dead_letters=True) == []
        assert seen["external"] == []
        record = await e2e.wait_for_record(
            order, lambda r: r.process_state is ProcessState.PROCESSED, "Processed"
        )
        assert record.resubmits == 1
