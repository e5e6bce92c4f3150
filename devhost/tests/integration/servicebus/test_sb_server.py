"""The broker as a component and as a command: lifecycle, durability, CLI."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusReceiver,
    ServiceBusSubQueue,
)
from devhost_tests_support import TESTS_ROOT
from devhost_tests_support.sb_helpers import (
    SEND_TIMEOUT_SECONDS,
    TEST_CONFIG,
    body_text,
    broker_config,
    receive_exactly,
)

from devhost.servicebus.server import BrokerError, ServiceBusBroker

pytestmark = pytest.mark.timeout(120)

CLI_READY_SECONDS = 30


def test_connection_string_names_the_ephemeral_port(broker: ServiceBusBroker) -> None:
    assert broker.port > 0
    assert broker.connection_string == (
        f"Endpoint=sb://127.0.0.1:{broker.port};SharedAccessKeyName=local;"
        "SharedAccessKey=local;UseDevelopmentEmulator=true"
    )


def test_a_busy_port_fails_start_with_a_clear_error(broker: ServiceBusBroker) -> None:
    with pytest.raises(BrokerError, match=f"cannot listen on 127.0.0.1:{broker.port}"):
        ServiceBusBroker(broker_config(), port=broker.port).start()


def test_stop_is_idempotent_and_closes_connected_clients() -> None:
    broker = ServiceBusBroker(broker_config())
    broker.start()
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("work") as sender:
            sender.send_messages(ServiceBusMessage("x"), timeout=SEND_TIMEOUT_SECONDS)
        broker.stop()
        broker.stop()
        assert not broker.running


def _fill(client: ServiceBusClient, receiver: ServiceBusReceiver) -> tuple[int, int]:
    """Leave one message in each state, "held" still locked by ``receiver``.

    Returns the deferred and the scheduled message's sequence numbers.
    """
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    with client.get_queue_sender("work") as sender:
        sender.send_messages(
            [ServiceBusMessage(t) for t in ("active", "to-defer", "to-dead-letter", "held")],
            timeout=SEND_TIMEOUT_SECONDS,
        )
        (scheduled,) = sender.schedule_messages(ServiceBusMessage("scheduled"), later, timeout=10)
    active, to_defer, to_dead_letter, held = receive_exactly(receiver, 4)
    receiver.abandon_message(active)
    receiver.defer_message(to_defer)
    receiver.dead_letter_message(to_dead_letter, reason="kept", error_description="across restarts")
    assert body_text(held) == "held"
    assert to_defer.sequence_number is not None
    return to_defer.sequence_number, scheduled


def _check_recovered(client: ServiceBusClient, deferred: int, scheduled: int) -> None:
    with client.get_queue_receiver("work") as receiver:
        peeked = {body_text(m): m.sequence_number for m in receiver.peek_messages(10, timeout=10)}
        assert peeked == {"active": 1, "to-defer": 2, "held": 4, "scheduled": scheduled}
        got = receive_exactly(receiver, 2)
        assert sorted(body_text(m) for m in got) == ["active", "held"]
        for message in got:
            receiver.complete_message(message)
        (back,) = receiver.receive_deferred_messages([deferred], timeout=10)
        receiver.complete_message(back)
    with client.get_queue_sender("work") as sender:
        sender.cancel_scheduled_messages(scheduled, timeout=10)
        sender.send_messages(ServiceBusMessage("new"), timeout=SEND_TIMEOUT_SECONDS)
    with client.get_queue_receiver("work", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        (dead,) = receive_exactly(dlq, 1)
        assert (dead.dead_letter_reason, dead.dead_letter_error_description) == (
            "kept",
            "across restarts",
        )
        dlq.complete_message(dead)
    with client.get_queue_receiver(
        "work", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as receiver:
        (new,) = receive_exactly(receiver, 1)
        # sequence numbers continue after recovery
        assert new.sequence_number is not None
        assert new.sequence_number > scheduled


def test_messages_survive_stop_and_start_on_the_same_file(tmp_path: Path) -> None:
    data = tmp_path / "broker.sqlite"
    first = ServiceBusBroker(broker_config(), data_path=data)
    first.start()
    with (
        ServiceBusClient.from_connection_string(first.connection_string) as client,
        client.get_queue_receiver("work") as receiver,
    ):
        deferred, scheduled = _fill(client, receiver)
        first.stop()  # while "held" is still locked
    with (
        ServiceBusBroker(broker_config(), data_path=data) as second,
        ServiceBusClient.from_connection_string(second.connection_string) as client,
    ):
        _check_recovered(client, deferred, scheduled)


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "Config.json"
    path.write_text(json.dumps(TEST_CONFIG))
    return path


class RunningCli:
    def __init__(self, process: subprocess.Popen[str], port: int, connection_string: str) -> None:
        self.process = process
        self.port = port
        self.connection_string = connection_string


def _start_cli(config: Path, *extra: str) -> RunningCli:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devhost",
            "servicebus",
            "--config",
            str(config),
            "--port",
            "0",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=TESTS_ROOT,
    )
    assert process.stdout is not None
    listening = process.stdout.readline().strip()
    connection_string = process.stdout.readline().strip()
    if not listening.startswith("listening on 127.0.0.1:"):
        process.kill()
        raise AssertionError(f"the CLI did not report readiness, it printed {listening!r}")
    return RunningCli(process, int(listening.rsplit(":", 1)[1]), connection_string)


@pytest.fixture
def cli_processes() -> Iterator[list[RunningCli]]:
    started: list[RunningCli] = []
    yield started
    for cli in started:
        if cli.process.poll() is None:
            cli.process.kill()
            cli.process.wait(timeout=CLI_READY_SECONDS)


def test_cli_serves_the_sdk_and_exits_cleanly_on_sigterm(
    config_file: Path, cli_processes: list[RunningCli]
) -> None:
    cli = _start_cli(config_file)
    cli_processes.append(cli)
    assert cli.connection_string.endswith(
        f":{cli.port};SharedAccessKeyName=local;SharedAccessKey=local;UseDevelopmentEmulator=true"
    )
    with ServiceBusClient.from_connection_string(cli.connection_string) as client:
        with client.get_queue_sender("work") as sender:
            sender.send_messages(ServiceBusMessage("via cli"), timeout=SEND_TIMEOUT_SECONDS)
        with client.get_queue_receiver("work") as receiver:
            (message,) = receive_exactly(receiver, 1)
            assert body_text(message) == "via cli"
            receiver.complete_message(message)
    cli.process.send_signal(signal.SIGTERM)
    assert cli.process.wait(timeout=CLI_READY_SECONDS) == 0


def test_cli_rejects_a_bad_config_with_a_message(tmp_path: Path) -> None:
    bad = tmp_path / "Config.json"
    bad.write_text(
        json.dumps(
            {
                "UserConfig": {
                    "Namespaces": [
                        {
                            "Name": "ns",
                            "Queues": [{"Name": "q", "Properties": {"LockDuration": "one minute"}}],
                        }
                    ]
                }
            }
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "devhost", "servicebus", "--config", str(bad), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=CLI_READY_SECONDS,
        cwd=TESTS_ROOT,
    )
    assert result.returncode == 2
    assert "one minute" in result.stderr


def test_accepted_messages_survive_kill_9_of_the_cli(
    config_file: Path, tmp_path: Path, cli_processes: list[RunningCli]
) -> None:
    data = tmp_path / "broker.sqlite"
    first = _start_cli(config_file, "--data", str(data))
    cli_processes.append(first)
    with (
        ServiceBusClient.from_connection_string(first.connection_string) as client,
        client.get_queue_receiver("work") as receiver,
    ):
        deferred, scheduled = _fill(client, receiver)
        os.kill(first.process.pid, signal.SIGKILL)  # while "held" is still locked
        first.process.wait(timeout=CLI_READY_SECONDS)
    second = _start_cli(config_file, "--data", str(data))
    cli_processes.append(second)
    with ServiceBusClient.from_connection_string(second.connection_string) as client:
        _check_recovered(client, deferred, scheduled)
