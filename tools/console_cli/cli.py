"""``python -m tools.console_cli``: the operator console from a terminal, over its HTTP functions.

    python -m tools.console_cli [--url URL] [--key KEY | --keys-file FILE]
                      [--operator-key KEY] [--bearer-token TOKEN] COMMAND ...

    list [--state Error] [--page-size 50] [--continuation TOKEN]
    show ORDER_ID
    resubmit ORDER_ID [--etag ETAG]
    retry-compensation ORDER_ID [--etag ETAG]
    cancel ORDER_ID --reason TEXT [--etag ETAG]
    dead-letters queues
    dead-letters list QUEUE [--after SEQUENCE] [--max 50]
    dead-letters resubmit QUEUE SEQUENCE
    dead-letters discard QUEUE SEQUENCE

The URL is the app's (``--url``, else CONSOLE_URL, else http://localhost:7071); the function
key comes from ``--key``, else CONSOLE_FUNCTION_KEY, else the devhost's keys file
(``--keys-file``, default ``.devhost/keys.json``). The operator key, which names the caller
and carries the read or act role, comes from ``--operator-key``, else CONSOLE_OPERATOR_KEY,
else ``console-keys.json`` next to the keys file (``tools.console_keys``): its read key for
the commands that look, its act key for those that change something. On Azure, where App
Service authentication with Entra ID stands in front of the app, pass an access token for it
too (``--bearer-token`` or CONSOLE_BEARER_TOKEN, e.g. from ``az account get-access-token
--resource <app id URI>``); the app then takes the caller and role from the token, and no
operator key is needed. It calls the same endpoints as the page, prints the JSON answer,
and exits 0 when the call succeeded, 3 on a conflict (409: another operator or the pipeline
acted first, the order's state does not allow the action, or the dead letter is gone), 4 for
an unknown order or queue, 1 on any other failure (401 without a known key, 403 when the
key's role does not allow the command). Only the standard library: no Azure SDK, no app code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://localhost:7071"
DEFAULT_KEYS_FILE = ".devhost/keys.json"
OPERATOR_KEYS_FILE = "console-keys.json"
TIMEOUT_SECONDS = 30.0
EXIT_FAILED, EXIT_CONFLICT, EXIT_NOT_FOUND = 1, 3, 4


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.console_cli", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--url", default=os.environ.get("CONSOLE_URL", DEFAULT_URL))
    parser.add_argument("--key", default=os.environ.get("CONSOLE_FUNCTION_KEY"))
    parser.add_argument("--keys-file", default=DEFAULT_KEYS_FILE)
    parser.add_argument("--operator-key", default=os.environ.get("CONSOLE_OPERATOR_KEY"))
    parser.add_argument("--bearer-token", default=os.environ.get("CONSOLE_BEARER_TOKEN"))
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="one page of the orders in a state")
    listing.add_argument("--state", default="Error")
    listing.add_argument("--page-size", type=int, default=50)
    listing.add_argument("--continuation")
    commands.add_parser("show", help="an order's timeline").add_argument("order_id")
    for name, text in (
        ("resubmit", "put an order in Error back to Pending (E8, C4)"),
        ("retry-compensation", "compensate a CompensationFailed order again (C2)"),
        ("cancel", "cancel a Pending or Processing order: it compensates (C1)"),
    ):
        action = commands.add_parser(name, help=text)
        action.add_argument("order_id")
        action.add_argument("--etag", help="refuse if the order changed since this version")
        if name == "cancel":
            action.add_argument("--reason", required=True)
    letters = commands.add_parser("dead-letters", help="triage the dead letters of a queue")
    what = letters.add_subparsers(dest="dead_letters", required=True)
    what.add_parser("queues", help="the queues whose dead letters are triaged")
    listing = what.add_parser("list", help="dead letters with reason and description")
    listing.add_argument("queue")
    listing.add_argument("--after", type=int, default=0, help="list past this sequence number")
    listing.add_argument("--max", type=int, default=50)
    for name, text in (
        ("resubmit", "send the dead letter back to its queue"),
        ("discard", "remove the dead letter for good"),
    ):
        action = what.add_parser(name, help=text)
        action.add_argument("queue")
        action.add_argument("sequence", type=int)
    return parser


def _key(args: argparse.Namespace) -> str | None:
    if args.key:
        return str(args.key)
    path = Path(args.keys_file)
    if path.exists():
        return str(json.loads(path.read_text(encoding="utf-8"))["function"])
    return None


def _operator_key(args: argparse.Namespace, method: str) -> str | None:
    """The key of the least role the call needs: read to look (GET), act to change."""
    if args.operator_key:
        return str(args.operator_key)
    path = Path(args.keys_file).with_name(OPERATOR_KEYS_FILE)
    if path.exists():
        return str(
            json.loads(path.read_text(encoding="utf-8"))["read" if method == "GET" else "act"]
        )
    return None


def _request(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None]:
    """The method, path and JSON body of the command."""
    quote = urllib.parse.quote
    if args.command == "dead-letters":
        path = "/api/console/dead-letters"
        if args.dead_letters == "queues":
            return "GET", path, None
        path += "/" + quote(args.queue, safe="")
        if args.dead_letters == "list":
            page = urllib.parse.urlencode({"after": str(args.after), "max": str(args.max)})
            return "GET", f"{path}?{page}", None
        return "POST", f"{path}/{args.sequence}/{args.dead_letters}", None
    if args.command == "list":
        query = {"state": args.state, "pageSize": str(args.page_size)}
        if args.continuation:
            query["continuation"] = args.continuation
        return "GET", "/api/console/orders?" + urllib.parse.urlencode(query), None
    path = f"/api/console/orders/{quote(args.order_id, safe='')}"
    if args.command == "show":
        return "GET", path, None
    body: dict[str, Any] = {}
    if args.etag:
        body["etag"] = args.etag
    if args.command == "cancel":
        body["reason"] = args.reason
    return "POST", f"{path}/{args.command}", body


def call(
    url: str,
    key: str | None,
    method: str,
    path: str,
    body: Any,
    bearer: str | None = None,
    operator_key: str | None = None,
) -> tuple[int, Any]:
    """One call to the console's HTTP functions: the status and the decoded JSON (or text)."""
    headers = {"Accept": "application/json"}
    if key:
        headers["x-functions-key"] = key
    if operator_key:
        headers["X-Console-Key"] = operator_key
    if bearer:
        headers["Authorization"] = f"Bearer {bearer}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(
        url.rstrip("/") + path, data=data, headers=headers, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    method, path, body = _request(args)
    try:
        status, answer = call(
            args.url,
            _key(args),
            method,
            path,
            body,
            args.bearer_token,
            _operator_key(args, method),
        )
    except OSError as error:
        print(f"console: cannot reach {args.url}: {error}", file=sys.stderr)
        return EXIT_FAILED
    if 200 <= status < 300:
        print(json.dumps(answer, indent=2))
        return 0
    why = answer.get("error") if isinstance(answer, dict) else answer
    label = {
        401: "unauthorized (a wrong or missing function key or operator key)",
        403: "forbidden (the operator key's role does not allow this)",
        409: "conflict",
    }.get(status, f"HTTP {status}")
    print(f"console: {label}: {why or ''}".rstrip(": "), file=sys.stderr)
    return {409: EXIT_CONFLICT, 404: EXIT_NOT_FOUND}.get(status, EXIT_FAILED)
