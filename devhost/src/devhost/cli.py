"""The devhost command line: a small dispatcher over subcommands.

``servicebus`` runs the embedded Service Bus broker, ``start`` runs a Functions app (its
triggers, orchestrations and activities). Each subcommand registers a parser builder in
``_SUBCOMMANDS`` whose parser sets ``run``. ``run_command`` parses, sets up logging and runs:
tools built on the devhost give their own parsers to it, so that every command logs alike.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from devhost.servicebus.process import ACTIVE_COUNTS_REQUEST
from devhost.start_command import add_start

if TYPE_CHECKING:
    from devhost.servicebus.server import ServiceBusBroker

Runner = Callable[[argparse.Namespace], int]


def _add_servicebus(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "servicebus",
        help="run the embedded Service Bus broker",
        description=(
            "Run a Service Bus-compatible AMQP broker that the azure-servicebus SDK can use. "
            "Prints 'listening on HOST:PORT' and the connection string once ready."
        ),
    )
    parser.add_argument("--config", required=True, help="emulator Config.json with the queues")
    parser.add_argument("--port", type=int, default=5672, help="TCP port; 0 picks a free one")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    parser.add_argument("--data", default=None, help="SQLite file that keeps messages durable")
    parser.add_argument(
        "--auto-create",
        action="store_true",
        help="create unknown queues with default settings instead of refusing them",
    )
    parser.add_argument(
        "--stop-with-stdin",
        action="store_true",
        help="stop when standard input closes (a parent process that dies closes it); a line "
        f"'{ACTIVE_COUNTS_REQUEST}' on it prints the active messages per queue as one JSON line",
    )
    parser.set_defaults(run=_run_servicebus)


def _run_servicebus(args: argparse.Namespace) -> int:
    from devhost.servicebus.config import ConfigError, load_config
    from devhost.servicebus.server import BrokerError, ServiceBusBroker

    try:
        config = load_config(args.config, auto_create=args.auto_create)
        broker = ServiceBusBroker(config, host=args.host, port=args.port, data_path=args.data)
        broker.start()
    except (ConfigError, BrokerError, OSError) as exc:
        print(f"servicebus: {exc}", file=sys.stderr)
        return 2
    print(f"listening on {broker.host}:{broker.port}", flush=True)
    print(broker.connection_string, flush=True)
    if args.stop_with_stdin:
        threading.Thread(target=_serve_stdin, args=(broker,), daemon=True).start()
    broker.serve_forever()
    return 0


def _serve_stdin(broker: ServiceBusBroker) -> None:
    """Answer each ``active-counts`` line on stdin; stop the broker when stdin ends."""
    from devhost.servicebus.server import BrokerError

    pending = b""
    # The raw descriptor, not sys.stdin: a daemon thread blocked in a buffered read holds
    # the buffer's lock, which aborts the interpreter's shutdown.
    while chunk := os.read(sys.stdin.fileno(), 4096):
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if line.strip().decode(errors="replace") != ACTIVE_COUNTS_REQUEST:
                continue
            try:
                answer: object = broker.active_counts()
            except BrokerError as error:
                answer = {"error": str(error)}
            print(json.dumps(answer), flush=True)
    # serve_forever stops cleanly on SIGTERM, whoever sends it.
    os.kill(os.getpid(), signal.SIGTERM)


_SUBCOMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    _add_servicebus,
    add_start,
]
LOG_FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m devhost", description="Local devhost.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add in _SUBCOMMANDS:
        add(subparsers)
    return parser


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse `argv` with `parser` (given a ``--log-level`` option here), log to standard
    error in the devhost's key=value format at that level, and run what the parser's
    ``run`` default names; its exit code."""
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr, format=LOG_FORMAT)
    run: Runner = args.run
    return run(args)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv)
