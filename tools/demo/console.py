"""``python -m tools.demo.console``: the operator console over a finished demo's data (E8, C2).

``make demo`` keeps its run in ``.devhost/demo`` (``--work-dir``): the SQLite stores, the
devhost's data (orchestration histories, function keys) and the broker's journal (dead
letters, alerts, replies), with the app settings the run used (``settings.json``). This
command starts the embedded broker on that journal and the devhost with the app on those
stores and that data, in one process, prints the console's URL with the function key and
serves until interrupted: the demo's orders, their timelines and its dead letters are there to
list, resubmit, retry or discard. ``make console`` runs it.

The simulated remote services ran inside the demo and are gone, so an order resubmitted here
fails its steps (and ends in Error or compensation again); what the demo did is all there.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from devhost import event_loop
from devhost.cli import run_command

SETTINGS_FILE = "settings.json"
BROKER_JOURNAL = "servicebus.sqlite"
DEFAULT_WORK_DIR = Path(".devhost/demo")
DEFAULT_HTTP_PORT = 7071
CONSOLE_ROUTE = "/api/console"
# Settings of the run that do not carry over: where its broker and telemetry were, and the
# Cosmos DB account key (a run on Cosmos is not kept; see `keep_settings`).
NOT_KEPT = frozenset(
    {
        "ServiceBusConnection",
        "DEVHOST_TELEMETRY_EXPORT",
        "PYTHON_ENABLE_OPENTELEMETRY",
        "CosmosConnection",
    }
)


def console_url(port: int, key: str, operator_key: str) -> str:
    """The page's URL: the function key in the query, the operator key in the fragment, which
    the browser keeps to itself (the page sends it as a header)."""
    return f"http://127.0.0.1:{port}{CONSOLE_ROUTE}?code={key}#key={operator_key}"


def keep_settings(work_dir: Path, values: Mapping[str, str]) -> bool:
    """Write the run's settings for this command; False (nothing written) when the run's
    state store does not outlive it (Cosmos DB: the demo's database or server is dropped)."""
    if values.get("STATE_STORE", "sqlite") != "sqlite":
        return False
    kept = {name: value for name, value in sorted(values.items()) if name not in NOT_KEPT}
    (work_dir / SETTINGS_FILE).write_text(json.dumps(kept, indent=2) + "\n", encoding="utf-8")
    return True


def command_line(work_dir: Path, port: int = DEFAULT_HTTP_PORT) -> str:
    """How to run this command over ``work_dir`` (what the demo prints)."""
    port_option = "" if port == DEFAULT_HTTP_PORT else f" --http-port {port}"
    return f"python -m tools.demo.console --work-dir {work_dir}{port_option}"


def where_to_open(work_dir: Path | None, port: int = DEFAULT_HTTP_PORT) -> list[str]:
    """What the demo prints at its end about the console over its data."""
    if work_dir is None:
        return [
            "Operator console: the run's data was in a temporary directory and is gone; run "
            "with --work-dir DIR to keep it, then: python -m tools.demo.console --work-dir DIR"
        ]
    settings_path = work_dir / SETTINGS_FILE
    if not settings_path.is_file():
        return [
            "Operator console: this run's state store did not outlive it (only a run on the "
            "SQLite store keeps its orders for the console)"
        ]
    from devhost.function_keys import FunctionKeys

    from tools.console_keys import local_keys
    from tools.demo.pipeline import HOST_DATA_DIR

    values = json.loads(settings_path.read_text(encoding="utf-8"))
    keys = FunctionKeys.load(work_dir / HOST_DATA_DIR, values)
    operator = local_keys(work_dir / HOST_DATA_DIR)
    return [
        f"Operator console over this run's orders: `make console` "
        f"(or {command_line(work_dir, port)}), then open "
        f"{console_url(port, keys.function, operator.act)}"
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.demo.console",
        description=(
            "Start the embedded broker and the devhost with the app over the stores, histories "
            "and messages a demo run kept in --work-dir, print the operator console's URL and "
            "serve until interrupted."
        ),
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=DEFAULT_WORK_DIR,
        help=f"the demo's --work-dir (default {DEFAULT_WORK_DIR}, what make demo uses)",
    )
    parser.add_argument(
        "--http-port", type=int, default=DEFAULT_HTTP_PORT, help="port of the console"
    )
    parser.set_defaults(run=run_demo_console)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv)


def run_demo_console(args: argparse.Namespace) -> int:
    settings_path: Path = args.work_dir / SETTINGS_FILE
    if not settings_path.is_file():
        print(
            f"demo.console: {settings_path} is missing: run `make demo` first (a demo on the "
            "SQLite store with --work-dir keeps its data there)",
            file=sys.stderr,
        )
        return 2
    values = json.loads(settings_path.read_text(encoding="utf-8"))
    try:
        return event_loop.run(_serve(args.work_dir, args.http_port, values))
    except (RuntimeError, ValueError, OSError) as error:
        print(f"demo.console: {error}", file=sys.stderr)
        return 2


async def _serve(work_dir: Path, port: int, values: dict[str, str]) -> int:
    from devhost.clock import RealClock
    from devhost.host import DevHost, HostOptions
    from devhost.servicebus.config import load_config
    from devhost.servicebus.server import ServiceBusBroker
    from devhost.settings import AppSettings
    from devhost.start_command import SERVICE_BUS_CONNECTION, serve_until_stopped

    from tools.console_keys import local_keys
    from tools.demo.pipeline import BROKER_CONFIG, HOST_DATA_DIR, REPOSITORY, STORES_DIR

    operator = local_keys(work_dir / HOST_DATA_DIR)
    broker = ServiceBusBroker(load_config(BROKER_CONFIG), data_path=work_dir / BROKER_JOURNAL)
    broker.start()
    try:
        options = HostOptions(
            app="function_app:app",
            app_root=REPOSITORY,
            data_dir=work_dir / HOST_DATA_DIR,
            http_port=port,
            clock=RealClock(),
        )
        settings = AppSettings(
            {
                **values,
                "SQLITE_DIRECTORY": str(work_dir / STORES_DIR),
                SERVICE_BUS_CONNECTION: broker.connection_string,
                "CONSOLE_KEYS": operator.setting,
            }
        )
        host = DevHost(options, settings)

        def ready(host: DevHost) -> None:
            assert host.http is not None
            assert host.keys is not None
            print(
                f"operator console over the demo in {work_dir}: "
                f"{console_url(host.http.port, host.keys.function, operator.act)}",
                flush=True,
            )

        return await serve_until_stopped(host, ready)
    finally:
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
