"""The settlement deadline: why it reaches into the extension, and how it fails (S1, C8).

``adapters.message_settlement.with_deadline`` swaps the stub inside the extension's actions
client, because the extension gives no other way to bound a settlement call. These tests pin
that reason against the installed extension, check that a change of shape is reported
clearly, and that the deadline fits the lock durations and the devhost's own wait.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import grpc
import pytest
from azurefunctions.extensions.bindings.protos.settlement_pb2_grpc import SettlementStub
from azurefunctions.extensions.bindings.servicebus import ServiceBusMessageActions
from devhost.servicebus.config import parse_duration
from devhost.triggers.settlement import SETTLE_TIMEOUT_SECONDS

from adapters.message_settlement import (
    SETTLEMENT_DEADLINE_SECONDS,
    ExtensionShapeError,
    with_deadline,
)

REPOSITORY = Path(__file__).resolve().parents[3]
CALLS = {"complete": "Complete", "abandon": "Abandon", "deadletter": "Deadletter"}


def actions_over(channel: grpc.Channel) -> ServiceBusMessageActions:
    """An actions client on ``channel``, built as the extension builds its singleton but
    without the worker's command line."""
    actions = ServiceBusMessageActions.__new__(ServiceBusMessageActions)
    actions._client = SettlementStub(channel)
    return actions


@pytest.mark.parametrize(("method", "call"), CALLS.items())
def test_the_extension_calls_its_private_stub_with_no_deadline(method: str, call: str) -> None:
    # If this fails, the extension changed: it may take a timeout of its own now (use that
    # and drop with_deadline), or keep its stub elsewhere (with_deadline must follow).
    settle = getattr(ServiceBusMessageActions, method)
    assert "timeout" not in inspect.signature(settle).parameters
    assert f"self._client.{call}(request)" in inspect.getsource(settle)


def test_the_bound_client_is_a_copy_and_the_extensions_singleton_is_untouched() -> None:
    with grpc.insecure_channel("127.0.0.1:1") as channel:
        actions = actions_over(channel)
        original_stub = actions._client
        bound = with_deadline(actions, 1.5)
        assert isinstance(bound, ServiceBusMessageActions)
        assert bound is not actions
        assert actions._client is original_stub
        assert bound._client is not original_stub


def test_an_actions_client_without_its_stub_fails_loudly() -> None:
    changed = ServiceBusMessageActions.__new__(ServiceBusMessageActions)
    with pytest.raises(ExtensionShapeError, match=r"ServiceBusMessageActions\._client"):
        with_deadline(changed, SETTLEMENT_DEADLINE_SECONDS)


def test_a_stub_that_lost_a_call_is_named_in_the_error() -> None:
    with grpc.insecure_channel("127.0.0.1:1") as channel:
        actions = actions_over(channel)
        del actions._client.Deadletter
        with pytest.raises(ExtensionShapeError, match="Deadletter"):
            with_deadline(actions, SETTLEMENT_DEADLINE_SECONDS)


def test_a_settlement_and_its_abandon_fit_the_lock_and_the_devhost_wait() -> None:
    document = json.loads((REPOSITORY / "servicebus.config.json").read_text(encoding="utf-8"))
    locks = [
        parse_duration(queue["Properties"]["LockDuration"]).total_seconds()
        for namespace in document["UserConfig"]["Namespaces"]
        for queue in namespace["Queues"]
    ]
    assert locks
    assert min(locks) >= 2 * SETTLEMENT_DEADLINE_SECONDS
    assert SETTLE_TIMEOUT_SECONDS >= 2 * SETTLEMENT_DEADLINE_SECONDS
