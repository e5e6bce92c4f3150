"""Benchmark: one supervisor sweep through the deadline index vs. a cross-partition query (U2, U3).

For each store size (default 1k, 5k, 20k state records, 1% of them expired) it runs the
same sweep query both ways and prints the median of several sweeps:

- `index`: `CosmosStateStore.query_expired`, i.e. single-partition queries over the
  buckets of the window in the deadline index, then one point read per entry found.
- `cross-partition`: the query U2 describes, on the state container, fanned out over
  every partition: ProcessState in (Processing, Compensating) and CompleteBy in the window.

Columns: partitions queried (buckets of the window, or the state container's physical
partitions, its feed ranges), items read (index entries, or documents the query
returned), request charge as the server reports it, and wall time. The local
`@vercel/cosmosdb-server` charges 1 RU per request, so there the charge counts requests;
against the Cosmos DB emulator or an account (`--connection`, a CosmosConnection string)
it is real RUs.

    python -m tools.bench.cosmos_sweep [--sizes 1000,5000,20000] [--sweeps 5] [--expired N]
                                 [--connection "AccountEndpoint=...;AccountKey=...;"]

What the local server can and cannot show: it keeps one physical partition and scans a
whole container for every query (partition key or not), so there the cross-partition
query is one cheap request and the index sweep's wall time grows with the index
container. The fan-out cost U2 is about - a cross-partition query pays a few RU for every
physical partition on every sweep, and a large store has many - appears only on an
account (or the emulator with many partitions): the `partitions` column shows what each
way's cost is proportional to. `--expired N` keeps the expired count fixed while the
store grows.

Not a test: it asserts nothing and is not collected by pytest.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from azure.cosmos import ContainerProxy

from adapters import deadline_index
from adapters.cosmos_connection import RequestCharge, connect
from adapters.cosmos_store import CosmosStateStore, open_cosmos_stores
from bootstrap import cosmos_options
from config import Settings
from domain import transitions
from domain.ports import OperationKind, StoreMetrics
from domain.records import ProcessState, StateRecord, format_utc
from domain.workflow import DEFAULT_ORDER_STEPS

NOW = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)
WINDOW = timedelta(days=1)
PAGE_SIZE = 100
EXPIRED_SHARE = 0.01
WRITERS = 8

_CROSS_PARTITION_QUERY = (
    "SELECT * FROM c WHERE c.ProcessState IN (@processing, @compensating) "
    "AND c.CompleteBy >= @start AND c.CompleteBy <= @now"
)


@dataclass(frozen=True)
class SweepCost:
    partitions: int
    items_read: int
    request_charge: float
    seconds: float


def expired_count(size: int, expired: int | None) -> int:
    return expired if expired is not None else max(1, int(size * EXPIRED_SHARE))


def record_for(index: int, expired: int) -> StateRecord:
    """The first `expired` records expired within the window; of the others, half are
    running with a future deadline and half are done."""
    order_id = f"bench-{index:06}"
    base = replace(
        transitions.new_record(order_id, None, NOW - timedelta(hours=2), DEFAULT_ORDER_STEPS),
        process_state=ProcessState.PROCESSING,
        attempt=1,
        locked_by=f"{order_id}:1",
    )
    if index < expired:
        return replace(base, complete_by=NOW - timedelta(seconds=30 + index))
    if index % 2:
        return replace(base, complete_by=NOW + timedelta(minutes=5 + index % 600))
    return replace(base, process_state=ProcessState.PROCESSED, complete_by=None)


def populate(states: CosmosStateStore, size: int, expired: int) -> None:
    with ThreadPoolExecutor(WRITERS) as pool:
        for _ in pool.map(lambda i: states.create(record_for(i, expired)), range(size)):
            pass


def sweep_through_index(states: CosmosStateStore, metrics: StoreMetrics) -> SweepCost:
    before = metrics.snapshot().get(OperationKind.QUERY)
    started = time.perf_counter()
    charge = 0.0
    token: str | None = None
    while True:
        page = states.query_expired(
            window_start=NOW - WINDOW, now=NOW, page_size=PAGE_SIZE, continuation=token
        )
        charge += page.request_charge
        token = page.continuation
        if token is None:
            break
    seconds = time.perf_counter() - started
    after = metrics.snapshot()[OperationKind.QUERY]
    items = after.items_read - (before.items_read if before else 0)
    buckets = deadline_index.buckets_between(NOW - WINDOW, NOW)
    return SweepCost(len(buckets), items, charge, seconds)


def sweep_across_partitions(state: ContainerProxy) -> SweepCost:
    charge = RequestCharge()
    started = time.perf_counter()
    items = 0
    pages = state.query_items(
        _CROSS_PARTITION_QUERY,
        parameters=[
            {"name": "@processing", "value": ProcessState.PROCESSING.value},
            {"name": "@compensating", "value": ProcessState.COMPENSATING.value},
            {"name": "@start", "value": format_utc(NOW - WINDOW)},
            {"name": "@now", "value": format_utc(NOW)},
        ],
        enable_cross_partition_query=True,
        max_item_count=PAGE_SIZE,
        response_hook=charge.hook,
    ).by_page()
    for page in pages:
        items += len(list(page))
    seconds = time.perf_counter() - started
    return SweepCost(len(list(state.read_feed_ranges())), items, charge.total, seconds)


def median(costs: list[SweepCost]) -> SweepCost:
    return SweepCost(
        costs[0].partitions,
        int(statistics.median(cost.items_read for cost in costs)),
        statistics.median(cost.request_charge for cost in costs),
        statistics.median(cost.seconds for cost in costs),
    )


@contextmanager
def cosmos_connection(connection: str | None) -> Iterator[str]:
    if connection:
        yield connection
        return
    from tests.support.cosmos_server import CosmosServer

    with CosmosServer() as server:
        yield server.connection_string


def run(
    sizes: list[int],
    sweeps: int,
    expired: int | None,
    connection: str | None,
    out: Callable[[str], None],
) -> None:
    out(
        f"{'records':>8} {'expired':>8} {'way':<16} {'partitions':>10} {'items read':>11} "
        f"{'charge':>9} {'ms':>9}"
    )
    with cosmos_connection(connection) as connection_string:
        for size in sizes:
            environ = {
                "CosmosConnection": connection_string,
                "COSMOS_DATABASE": f"bench-{uuid.uuid4().hex[:8]}",
                "COSMOS_READ_TIMEOUT_SECONDS": "120",
                "COSMOS_OPERATION_TIMEOUT_SECONDS": "300",
            }
            settings = Settings.from_environ(environ)
            metrics = StoreMetrics()
            options = cosmos_options(settings)
            states, orders = open_cosmos_stores(options, environ, metrics)
            client, _ = connect(environ, options)
            database = client.get_database_client(settings.cosmos_database)
            try:
                populate(states, size, expired_count(size, expired))
                state = database.get_container_client(settings.cosmos_state_container)
                costs = {
                    "index": [sweep_through_index(states, metrics) for _ in range(sweeps)],
                    "cross-partition": [sweep_across_partitions(state) for _ in range(sweeps)],
                }
                for name, measured in costs.items():
                    cost = median(measured)
                    out(
                        f"{size:>8} {expired_count(size, expired):>8} {name:<16} "
                        f"{cost.partitions:>10} {cost.items_read:>11} {cost.request_charge:>9.1f} "
                        f"{cost.seconds * 1000:>9.1f}"
                    )
            finally:
                client.delete_database(settings.cosmos_database)
                client.close()
                states.close()
                orders.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument(
        "--expired",
        type=int,
        default=None,
        help="expired records per store (default: 1%% of its records)",
    )
    parser.add_argument(
        "--connection",
        default=None,
        help="a CosmosConnection string; by default a local @vercel/cosmosdb-server is started",
    )
    arguments = parser.parse_args()
    # azure-cosmos skips certificate checks for 127.0.0.1 and urllib3 warns per request.
    warnings.filterwarnings("ignore", message="Unverified HTTPS request")
    sizes = [int(size) for size in arguments.sizes.split(",")]
    run(sizes, arguments.sweeps, arguments.expired, arguments.connection, print)


if __name__ == "__main__":
    main()
