"""The broker as a child process (what the demo runs): usable through the real SDK, stopped
cleanly, gone when its parent dies without stopping it (no orphaned broker), and back on its
port with its journal after a kill."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from devhost_tests_support import BROKER_CONFIG, TESTS_ROOT

from devhost.servicebus.process import BrokerProcess
from devhost.testing import eventually_sync

CONFIG = BROKER_CONFIG
TIMEOUT_SECONDS = 10.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: only its parent has not reaped it yet.
    return "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_messages_flow_through_the_broker_process_and_stop_ends_it() -> None:
    broker = BrokerProcess(CONFIG)
    broker.start()
    pid = broker.pid
    assert pid is not None
    try:
        with ServiceBusClient.from_connection_string(broker.connection_string) as client:
            with client.get_queue_sender("orders") as sender:
                sender.send_messages(ServiceBusMessage(b"hello"), timeout=TIMEOUT_SECONDS)
            with client.get_queue_receiver("orders", max_wait_time=TIMEOUT_SECONDS) as receiver:
                [message] = receiver.receive_messages(max_message_count=1)
                receiver.complete_message(message)
        assert b"".join(message.body) == b"hello"
    finally:
        broker.stop()
    assert not _alive(pid)


def test_the_broker_process_counts_the_active_messages_of_each_queue() -> None:
    # What the demo samples as consumer lag: sent and not yet received; a locked message is
    # not active, a completed one is gone.
    broker = BrokerProcess(CONFIG)
    broker.start()
    try:
        assert broker.active_counts()["orders"] == 0
        with ServiceBusClient.from_connection_string(broker.connection_string) as client:
            with client.get_queue_sender("orders") as sender:
                sender.send_messages(
                    [ServiceBusMessage(b"one"), ServiceBusMessage(b"two")], timeout=TIMEOUT_SECONDS
                )
            counts = broker.active_counts()
            assert counts["orders"] == 2
            assert counts["jobs"] == 0, "another queue counts its own"
            with client.get_queue_receiver("orders", max_wait_time=TIMEOUT_SECONDS) as receiver:
                [message] = receiver.receive_messages(max_message_count=1)
                assert broker.active_counts()["orders"] == 1
                receiver.complete_message(message)
        assert broker.active_counts()["orders"] == 1
    finally:
        broker.stop()


def test_the_broker_process_stops_when_its_parent_dies() -> None:
    parent = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import os
                from pathlib import Path
                from devhost.servicebus.process import BrokerProcess
                broker = BrokerProcess(Path({str(CONFIG)!r}))
                broker.start()
                print(broker.pid, flush=True)
                os._exit(0)  # dies without stopping the broker
                """
            ),
        ],
        cwd=TESTS_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    pid = int(parent.stdout.strip())

    eventually_sync(lambda: not _alive(pid), f"the orphaned broker (pid {pid}) to stop")


def test_a_killed_broker_process_comes_back_on_its_port_with_its_journal(tmp_path: Path) -> None:
    """``kill`` ends it as a crash would; ``start`` brings it back where clients look for it,
    holding what it had accepted."""
    broker = BrokerProcess(CONFIG, data=tmp_path / "broker.sqlite")
    broker.start()
    port, first_pid = broker.port, broker.pid
    try:
        with (
            ServiceBusClient.from_connection_string(broker.connection_string) as client,
            client.get_queue_sender("orders") as sender,
        ):
            sender.send_messages(ServiceBusMessage(b"kept"), timeout=TIMEOUT_SECONDS)
        broker.kill()
        assert first_pid is not None
        assert not _alive(first_pid)
        broker.start()
        assert broker.port == port
        with (
            ServiceBusClient.from_connection_string(broker.connection_string) as client,
            client.get_queue_receiver("orders", max_wait_time=TIMEOUT_SECONDS) as receiver,
        ):
            [message] = receiver.receive_messages(max_message_count=1)
            receiver.complete_message(message)
        assert b"".join(message.body) == b"kept"
    finally:
        broker.stop()
