"""The smoke test's command line: one order through the deployed app, one verdict (S1, R1, R2).

After `azd up` the postdeploy hook runs it with the deployer's identity
(``DefaultAzureCredential``) against the namespace the deployment outputs
(SERVICEBUS_FULLY_QUALIFIED_NAMESPACE); ``make test`` runs it with the local broker's
connection string. It prints one line per check and a final verdict, and exits 1 with the
named cause when a check fails (docs/deployment.md, "After `azd up`: the smoke test").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from azure.identity.aio import DefaultAzureCredential
from azure.servicebus.aio import ServiceBusClient

from domain.workflow import DEFAULT_ORDER_STEPS
from tools.smoke.probe import Target, probe
from tools.smoke.verdict import Verdict, judge

DEFAULT_BOUND_SECONDS = 300.0
"""Long enough for a Flex Consumption app to wake from zero instances and run every step."""


def parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    """The options, each defaulting to the environment azd gives its hooks."""
    parse = argparse.ArgumentParser(
        prog="python -m tools.smoke", description="Send one order and check its statuses."
    )
    where = parse.add_mutually_exclusive_group()
    where.add_argument(
        "--namespace",
        default=environ.get("SERVICEBUS_FULLY_QUALIFIED_NAMESPACE"),
        help="Service Bus namespace FQDN, reached with DefaultAzureCredential"
        " (env SERVICEBUS_FULLY_QUALIFIED_NAMESPACE)",
    )
    where.add_argument(
        "--connection-string",
        default=environ.get("SERVICEBUS_CONNECTION_STRING"),
        help="a connection string instead of an identity (env SERVICEBUS_CONNECTION_STRING)",
    )
    parse.add_argument("--orders-queue", default=environ.get("ORDERS_QUEUE", "orders"))
    parse.add_argument(
        "--reply-queue",
        default=environ.get("SMOKE_REPLY_QUEUE"),
        help="an allow-listed reply queue (REPLY_QUEUES) only the smoke test reads"
        " (env SMOKE_REPLY_QUEUE)",
    )
    parse.add_argument(
        "--steps",
        default=environ.get("ORDER_STEPS", ",".join(DEFAULT_ORDER_STEPS)),
        help="the app's ORDER_STEPS, comma-separated",
    )
    parse.add_argument(
        "--bound",
        type=float,
        default=DEFAULT_BOUND_SECONDS,
        help="seconds to wait for the order's statuses",
    )
    return parse


async def smoke(args: argparse.Namespace) -> Verdict:
    """Run the smoke test the parsed options describe."""
    steps = tuple(step.strip() for step in args.steps.split(",") if step.strip())

    def target(client: Callable[[], ServiceBusClient]) -> Target:
        return Target(client, args.orders_queue, args.reply_queue, steps)

    if args.connection_string:
        connection_string: str = args.connection_string
        clients = target(lambda: ServiceBusClient.from_connection_string(connection_string))
        return judge(await probe(clients, args.bound))
    async with DefaultAzureCredential() as credential:
        clients = target(lambda: ServiceBusClient(args.namespace, credential))
        return judge(await probe(clients, args.bound))


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Print the checks and the verdict; 0 passed, 1 failed, 2 options missing."""
    parse = parser(os.environ if environ is None else environ)
    args = parse.parse_args(argv)
    if not (args.namespace or args.connection_string):
        parse.error("give --namespace or --connection-string (or their environment variables)")
    if not args.reply_queue:
        parse.error("give --reply-queue (or SMOKE_REPLY_QUEUE)")
    print(f"smoke test: one order to {args.orders_queue}, statuses on {args.reply_queue}")
    verdict = asyncio.run(smoke(args))
    for line in verdict.report():
        print(line)
    sys.stdout.flush()
    return 0 if verdict.passed else 1
