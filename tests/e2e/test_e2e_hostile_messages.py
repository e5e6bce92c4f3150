"""Whole Service Bus messages of every shape a client could send, through the real SDK and
broker to the running app (S1-S3, C3, C5): any body section, property set, size and
encoding. Each message is accepted once or dead-lettered on its first delivery with a reason
that names what is wrong, and afterwards the dead-letter watcher and the console's
dead-letter list still work.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from azure.functions.timer import TimerRequest
from azure.servicebus.amqp import AmqpAnnotatedMessage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.e2e_helpers import ALERTS, E2E, ORDERS, running_pipeline
from tests.property.strategies import (
    CONTROL_CHARACTERS,
    REPLY_TOS,
    submissions,
    valid_documents,
)
from tools.console_keys import local_keys

HTTP_TIMEOUT = aiohttp.ClientTimeout(total=30)
READ_REASONS = {"InvalidMessage", "OrderConflict"}
"""The reasons the app dead-letters a submission with; MaxDeliveryCountExceeded would mean a
message the app failed on until the broker gave up."""
MAX_MESSAGE_ID = 128
"""Service Bus keeps message ids up to 128 characters."""


@dataclass(frozen=True)
class Sent:
    """One message as a client sends it, with the order id its body names, if any."""

    message_id: str
    section: str
    body: Any
    properties: dict[str, Any] = field(default_factory=dict)
    application_properties: dict[str, Any] = field(default_factory=dict)

    def amqp(self) -> AmqpAnnotatedMessage:
        content = {f"{self.section}_body": self.body}
        return AmqpAnnotatedMessage(
            **content,
            properties={"message_id": self.message_id, **self.properties},
            application_properties=self.application_properties or None,
        )

    @property
    def order_id(self) -> str | None:
        if self.section != "data":
            return None
        try:
            document = json.loads(self.body)
        except (ValueError, RecursionError):
            return None
        candidate = document.get("orderId") if isinstance(document, dict) else None
        return candidate if isinstance(candidate, str) else None


TEXT = st.text(
    st.characters(exclude_categories=["Cs"]) | CONTROL_CHARACTERS | st.sampled_from("\u2028\u202e"),
    max_size=40,
)
SCALARS = st.none() | st.booleans() | st.integers(-(2**31), 2**31 - 1) | TEXT


@st.composite
def data_bodies(draw: st.DrawFn) -> bytes:
    """A data section: what the submission tests draw, in UTF-8 or UTF-16, or past the size
    a submission may have."""
    kind = draw(st.sampled_from(["submission", "submission", "utf-16", "oversized"]))
    if kind == "oversized":
        return json.dumps({**draw(valid_documents()), "pad": "p" * 70_000}).encode()
    message = draw(submissions())
    body = message.body(message.document)
    raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
    if kind == "utf-16":
        return raw.decode("utf-8", "replace").encode("utf-16")
    return raw


@st.composite
def client_messages(draw: st.DrawFn, index: int) -> Sent:
    section = draw(st.sampled_from(["data", "data", "data", "value", "sequence"]))
    body: Any
    if section == "data":
        body = draw(data_bodies())
    elif section == "value":
        body = draw(st.dictionaries(TEXT, SCALARS, max_size=4) | st.lists(SCALARS) | SCALARS)
    else:
        body = draw(st.lists(st.lists(SCALARS, max_size=3), min_size=1, max_size=3))
    # Unique, so each message can be found again; the rest of it is the sender's.
    message_id = f"m{index}-{draw(TEXT)}"[:MAX_MESSAGE_ID]
    properties = {
        name: value
        for name, value in (
            ("reply_to", draw(REPLY_TOS)),
            ("content_type", draw(st.none() | TEXT)),
            ("subject", draw(st.none() | TEXT)),
            ("correlation_id", draw(st.none() | TEXT)),
        )
        if value is not None
    }
    application_properties = draw(
        st.dictionaries(st.text(min_size=1, max_size=12), SCALARS, max_size=3)
    )
    return Sent(message_id, section, body, properties, application_properties)


@st.composite
def batches(draw: st.DrawFn) -> list[Sent]:
    count = draw(st.integers(12, 20))
    return [draw(client_messages(index)) for index in range(count)]


async def console_dead_letters(e2e: E2E) -> tuple[int, Any]:
    assert e2e.pipeline.host.http is not None
    assert e2e.pipeline.host.keys is not None
    url = f"http://127.0.0.1:{e2e.pipeline.host.http.port}/api/console/dead-letters/orders"
    headers = {
        "x-functions-key": e2e.pipeline.host.keys.function,
        "X-Console-Key": local_keys(e2e.pipeline.host.options.data_dir).read,
    }
    async with (
        aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session,
        session.get(url, params={"max": "100"}, headers=headers) as response,
    ):
        return response.status, await response.json(content_type=None)


async def exercise(work_dir: Path, batch: list[Sent]) -> None:
    async with running_pipeline(work_dir) as e2e:
        for sent in batch:
            await e2e.send_amqp(ORDERS, sent.amqp())
        await e2e.drained(ORDERS, "every client message settled")

        dead = {d.message_id: d for d in await e2e.peek(ORDERS, dead_letters=True)}
        for sent in batch:
            letter = dead.get(sent.message_id)
            if letter is None:
                # Completed, so accepted: its order has a state record (S2, S4).
                assert sent.order_id is not None, sent
                assert await e2e.record(sent.order_id) is not None, sent
                continue
            assert letter.dead_letter_reason in READ_REASONS, (letter, sent)
            assert letter.dead_letter_description, letter
            assert len(letter.dead_letter_description) <= 4096
        await e2e.pipeline.host.invoke("watch_dead_letter_queues", TimerRequest(past_due=False))
        alerts = [a for a in await e2e.peek(ALERTS) if a.body.get("kind") == "dead-letter"]
        assert len(alerts) == len(dead)
        status, listed = await console_dead_letters(e2e)
        assert status == 200, listed
        assert len(listed["deadLetters"]) == len(dead)


@settings(
    max_examples=2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(batch=batches())
def test_every_client_message_is_accepted_once_or_dead_lettered_with_a_reason_s3(
    tmp_path_factory: pytest.TempPathFactory, batch: list[Sent]
) -> None:
    asyncio.run(exercise(tmp_path_factory.mktemp("hostile"), batch))
