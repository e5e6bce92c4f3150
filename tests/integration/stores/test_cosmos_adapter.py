"""What only the Cosmos DB adapter can show, on the wire against a Cosmos-API server (U2, U3).

The contract and service suites run against Cosmos too; these tests cover the rest: the
container definitions (indexing policy, TTL; created by processes that start together), the
deadline index of U3 (consulted by the sweep, kept in step with every write, stale entries
removed, entries of a lost race removed), request charge in the metrics (U2, C9), no TTL on
finished records and the removal of an older version's (C3), the launcher's fixes of the test
server's bugs, StoreUnavailable for a store that is down, and `STATE_STORE=cosmos` in the
composition root.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.cosmos import ContainerProxy, CosmosClient, DatabaseProxy
from azure.cosmos.exceptions import (
    CosmosAccessConditionFailedError,
    CosmosResourceNotFoundError,
)
from devhost import cosmos_server as cosmos_server_module
from devhost.node_service import node_modules_with

import bootstrap
from adapters import blocking_calls, deadline_index
from adapters.cosmos_connection import CosmosOptions
from adapters.cosmos_store import CosmosOrderStore, CosmosStateStore, open_cosmos_stores
from adapters.identity_connection import ConnectionSettingsError
from config import Settings
from domain import transitions
from domain.ports import OperationKind, PreconditionFailed, StoreMetrics, StoreUnavailable
from domain.records import InstanceId, ProcessState, StateRecord
from domain.workflow import Step
from services.retention import retire_finished
from services.supervisor import RecoveryKind, SweepReport, catch_up, sweep
from tests.integration.stores.store_backends import cosmos_environ
from tests.support.cosmos_server import CosmosServer, CosmosServerMissing

NOW = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)
FUTURE = NOW + timedelta(minutes=5)
SDK_TIMEOUT = 30
OPENERS = 6
DEADLINE_INDEX_CONTAINER = Settings().cosmos_deadline_index_container
STEPS = ("reserve-stock", "charge-payment", "ship-order")
LAST = Step(2, STEPS[2], "ship-1")
"""The last step, completed: what `finish_steps` records."""


@dataclass
class Cosmos:
    """Stores over a fresh database, and raw SDK access to look behind them."""

    environ: dict[str, str]
    settings: Settings
    options: CosmosOptions
    database: DatabaseProxy
    metrics: StoreMetrics
    states: CosmosStateStore
    orders: CosmosOrderStore

    def container(self, name: str) -> ContainerProxy:
        return self.database.get_container_client(name)

    def index_entries(self) -> list[dict[str, Any]]:
        return list(
            self.container(DEADLINE_INDEX_CONTAINER).query_items(
                "SELECT * FROM e", enable_cross_partition_query=True, timeout=SDK_TIMEOUT
            )
        )

    def state_document(self, order_id: str) -> dict[str, Any]:
        document: dict[str, Any] = self.container("state").read_item(
            order_id, partition_key=order_id, timeout=SDK_TIMEOUT
        )
        return document


@pytest.fixture
def cosmos(cosmos_server: CosmosServer) -> Iterator[Cosmos]:
    environ = cosmos_environ(cosmos_server.connection_string, f"test-{uuid.uuid4().hex[:12]}")
    settings = Settings.from_environ(environ)
    options = bootstrap.cosmos_options(settings)
    metrics = StoreMetrics()
    states, orders = open_cosmos_stores(options, environ, metrics)
    client = CosmosClient.from_connection_string(cosmos_server.connection_string)
    yield Cosmos(
        environ,
        settings,
        options,
        client.get_database_client(settings.cosmos_database),
        metrics,
        states,
        orders,
    )
    states.close()
    orders.close()
    client.close()


def running(order_id: str, complete_by: datetime, **changes: Any) -> StateRecord:
    record = replace(
        transitions.new_record(order_id, None, NOW - timedelta(minutes=10), STEPS),
        process_state=ProcessState.PROCESSING,
        attempt=1,
        locked_by=f"{order_id}:1",
        complete_by=complete_by,
    )
    return replace(record, **changes)


def create(states: CosmosStateStore, record: StateRecord) -> StateRecord:
    created = states.create(record)
    assert created.created
    return created.record


# --- containers (one definition, created when missing) -------------------------------------


def test_the_app_creates_its_containers_with_their_keys_indexes_and_ttl(cosmos: Cosmos) -> None:
    state = cosmos.container("state").read(timeout=SDK_TIMEOUT)
    assert state["partitionKey"]["paths"] == ["/OrderID"]
    assert state["defaultTtl"] == -1
    composite = state["indexingPolicy"]["compositeIndexes"]
    assert [[part["path"] for part in index] for index in composite] == [
        ["/ProcessState", "/CompleteBy"]
    ]
    orders = cosmos.container("orders").read(timeout=SDK_TIMEOUT)
    assert orders["partitionKey"]["paths"] == ["/OrderID"]
    deadlines = cosmos.container(DEADLINE_INDEX_CONTAINER).read(timeout=SDK_TIMEOUT)
    assert deadlines["partitionKey"]["paths"] == ["/bucket"]
    again_states, again_orders = open_cosmos_stores(cosmos.options, cosmos.environ)
    again_states.close()
    again_orders.close()


def test_processes_that_start_together_all_open_a_new_database(
    cosmos_server: CosmosServer,
) -> None:
    """Function instances (or the demo and its worker) open the stores at the same moment: the
    SDK's read-then-create makes all but one see 409 on create, and none may fail for it."""
    environ = cosmos_environ(cosmos_server.connection_string, f"test-{uuid.uuid4().hex[:12]}")
    options = bootstrap.cosmos_options(Settings.from_environ(environ))
    starting = threading.Barrier(OPENERS, timeout=SDK_TIMEOUT)

    def open_together() -> None:
        starting.wait()
        states, orders = open_cosmos_stores(options, environ)
        states.close()
        orders.close()

    with ThreadPoolExecutor(OPENERS) as pool:
        for opened in [pool.submit(open_together) for _ in range(OPENERS)]:
            opened.result(timeout=SDK_TIMEOUT)


def test_finished_records_carry_no_ttl_and_stay_as_tombstones_c3(cosmos: Cosmos) -> None:
    """No write gives a state record an expiry: a finished one stays, the tombstone that
    keeps its OrderID known once the retirement has removed its order's data (C3, S2)."""
    create(cosmos.states, running("o-1", FUTURE))
    done = cosmos.states.fenced_update(
        transitions.finish_steps(InstanceId("o-1", 1), LAST, now=NOW)
    )
    assert done is not None
    assert "ttl" not in cosmos.state_document("o-1")
    retired = cosmos.states.replace(transitions.retire(done, now=NOW))
    assert retired.retired_at == NOW
    assert "ttl" not in cosmos.state_document("o-1")
    record = create(cosmos.states, running("o-2", NOW - timedelta(seconds=1)))
    cosmos.states.replace(
        transitions.give_up(record, now=NOW, reason="gone", compensation_deadline=FUTURE)
    )
    assert "ttl" not in cosmos.state_document("o-2")


async def test_a_record_with_the_ttl_of_an_older_version_loses_it_and_never_vanishes_c3(
    cosmos: Cosmos,
) -> None:
    """Records an older version finished carry a `ttl`, which would delete them, tombstone
    and all. The retirement's query serves them whatever their state or age: a recent or
    CompensationFailed one is written back without it, a due one is retired (C3)."""
    until = NOW - timedelta(days=30)
    old, recent = until - timedelta(hours=1), until + timedelta(hours=1)
    for order_id, state, updated_at in (
        ("old-done", ProcessState.PROCESSED, old),
        ("recent-done", ProcessState.PROCESSED, recent),
        ("owes-an-undo", ProcessState.COMPENSATION_FAILED, old),
    ):
        record = replace(running(order_id, FUTURE), process_state=state, updated_at=updated_at)
        create(cosmos.states, replace(record, locked_by=None, complete_by=None))
        cosmos.container("state").patch_item(
            order_id,
            partition_key=order_id,
            patch_operations=[{"op": "set", "path": "/ttl", "value": 30 * 86400}],
            timeout=SDK_TIMEOUT,
        )
    purged: list[str] = []

    async def purge(instance_id: str) -> None:
        purged.append(instance_id)

    report = await retire_finished(
        cosmos.states,
        cosmos.orders,
        purge,
        now=NOW,
        retention=NOW - until,
        scan=cosmos.settings.supervisor_policy.scan,
        blocking=blocking_calls.run,
    )

    assert (report.retired, report.expiry_removed, report.failed) == (1, 2, 0)
    assert purged == ["old-done:1"]
    for order_id in ("old-done", "recent-done", "owes-an-undo"):
        assert "ttl" not in cosmos.state_document(order_id), order_id
    retired = {
        order_id: record.retired_at
        for order_id in ("old-done", "recent-done", "owes-an-undo")
        if (record := cosmos.states.get(order_id)) is not None
    }
    assert retired == {"old-done": NOW, "recent-done": None, "owes-an-undo": None}
    assert cosmos.states.query_retirable(until=until, page_size=10).items == ()


# --- the deadline index (U3) ---------------------------------------------------------------


def test_a_sweep_reads_index_entries_of_expired_records_only_u3(cosmos: Cosmos) -> None:
    """The sweep finds expired records through the index alone: it reads their entries and
    nothing of the live or pending records, and a record without an entry is invisible to
    it, which is why the adapter writes the entry before the record."""
    for index in range(60):
        create(cosmos.states, running(f"live-{index:02}", NOW + timedelta(minutes=index + 1)))
    for index in range(20):
        create(cosmos.states, transitions.new_record(f"pending-{index:02}", None, NOW, STEPS))
    for index in range(3):
        create(cosmos.states, running(f"late-{index}", NOW - timedelta(minutes=index + 1)))
    hidden = create(cosmos.states, running("unindexed", NOW - timedelta(minutes=1)))
    assert hidden.etag is not None
    entry = deadline_index.EntryRef.parse(hidden.etag.partition("#")[2])
    cosmos.container(DEADLINE_INDEX_CONTAINER).delete_item(
        entry.entry_id, partition_key=entry.bucket, timeout=SDK_TIMEOUT
    )
    report = sweep(
        cosmos.states,
        NOW,
        policy=cosmos.settings.supervisor_policy,
        timeouts=cosmos.settings.timeouts,
    )
    assert sorted(r.record.order_id for r in report.recoveries) == ["late-0", "late-1", "late-2"]
    query = cosmos.metrics.snapshot()[OperationKind.QUERY]
    assert query.items_read == 3
    assert report.request_charge > 0
    assert cosmos.states.get("unindexed") == hidden


def test_the_index_holds_one_entry_per_running_record_through_its_life_u3(
    cosmos: Cosmos,
) -> None:
    record = create(cosmos.states, transitions.new_record("o-1", None, NOW, STEPS))
    assert cosmos.index_entries() == []
    claimed = cosmos.states.replace(transitions.claim(record, now=NOW, claim_deadline=FUTURE))
    instance = InstanceId("o-1", claimed.attempt)
    for index, name in enumerate(STEPS):
        done = Step(index - 1, STEPS[index - 1], f"o-1:{index - 1}") if index else None
        deadline = NOW + timedelta(minutes=6 + index)
        change = transitions.begin_step(
            instance, Step(index, name), complete_by=deadline, now=NOW, done=done
        )
        assert cosmos.states.fenced_update(change) is not None
        entries = cosmos.index_entries()
        assert [entry["CompleteBy"] for entry in entries] == [
            cosmos.state_document("o-1")["CompleteBy"]
        ]
        assert cosmos.state_document("o-1")["DeadlineEntry"] == deadline_index.entry_ref(entries[0])
    cosmos.states.fenced_update(transitions.finish_steps(instance, LAST, now=NOW))
    assert cosmos.index_entries() == []


def test_a_lost_race_leaves_no_index_entry_behind_d3_d4(cosmos: Cosmos) -> None:
    record = create(cosmos.states, transitions.new_record("o-1", None, NOW, STEPS))
    winner = cosmos.states.replace(transitions.claim(record, now=NOW, claim_deadline=FUTURE))
    with pytest.raises(PreconditionFailed):
        cosmos.states.replace(transitions.claim(record, now=NOW, claim_deadline=FUTURE))
    stale_attempt = transitions.begin_step(
        InstanceId("o-1", 7), Step(0, STEPS[0]), complete_by=FUTURE, now=NOW
    )
    assert cosmos.states.fenced_update(stale_attempt) is None
    entries = cosmos.index_entries()
    assert len(entries) == 1
    assert winner.etag is not None
    assert winner.etag.endswith(deadline_index.entry_ref(entries[0]))


def test_a_sweep_removes_dead_entries_and_keeps_those_of_writes_in_flight_u3(
    cosmos: Cosmos,
) -> None:
    deadline = NOW - timedelta(minutes=1)
    record = create(cosmos.states, running("o-1", deadline))
    document = cosmos.state_document("o-1")
    index = cosmos.container(DEADLINE_INDEX_CONTAINER)

    def orphan(basis: dict[str, Any], order_id: str = "o-1") -> None:
        # What a writer that crashed after writing its entry leaves behind.
        index.create_item(
            {
                "id": f"{order_id}.{uuid.uuid4().hex}",
                "bucket": deadline_index.bucket_of(deadline),
                "OrderID": order_id,
                "CompleteBy": document["CompleteBy"],
                "ProcessState": "Processing",
                "basis": basis,
            },
            timeout=SDK_TIMEOUT,
        )

    dead = [
        deadline_index.create_basis(),
        deadline_index.etag_basis("an-etag-long-gone"),
        deadline_index.fence_basis("o-1:0", [ProcessState.PROCESSING]),
    ]
    in_flight = [
        deadline_index.etag_basis(document["_etag"]),
        deadline_index.fence_basis("o-1:1", [ProcessState.PROCESSING]),
    ]
    for basis in dead + in_flight:
        orphan(basis)
    orphan(deadline_index.create_basis(), order_id="o-2")  # a create still in flight
    assert len(cosmos.index_entries()) == 7
    page = cosmos.states.query_expired(window_start=NOW - timedelta(hours=1), now=NOW, page_size=10)
    assert page.items == (record,)
    remaining = sorted((entry["OrderID"], str(entry["basis"])) for entry in cosmos.index_entries())
    assert remaining == sorted(
        [
            ("o-1", str(deadline_index.create_basis())),
            ("o-2", str(deadline_index.create_basis())),
            *[("o-1", str(basis)) for basis in in_flight],
        ]
    )


def test_expired_pages_resume_across_buckets_in_deadline_order_u2(cosmos: Cosmos) -> None:
    deadlines = [NOW - timedelta(minutes=minutes) for minutes in (5, 65, 125, 185)]
    for index, deadline in enumerate(deadlines):
        create(cosmos.states, running(f"o-{index}", deadline))
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        page = cosmos.states.query_expired(
            window_start=NOW - timedelta(hours=4), now=NOW, page_size=1, continuation=token
        )
        pages += 1
        seen += [record.order_id for record in page.items]
        token = page.continuation
        if token is None:
            break
        assert pages < 20
    assert seen == ["o-3", "o-2", "o-1", "o-0"]


def test_the_catch_up_reads_only_the_index_buckets_of_its_window_u2_u3(
    cosmos: Cosmos, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catch-up reads the deadline index bucket by bucket, each bucket of its window
    once - single-partition queries, none of the sweep window's, none older - and finds
    the record that expired days ago through its entry alone. The record older than its
    window is its last scan's find, from the state records, not from the index."""
    settings = replace(
        cosmos.settings,
        supervisor_window_seconds=86400,
        supervisor_catchup_window_seconds=7 * 86400,
    )
    for order_id, deadline in [
        ("live", NOW + timedelta(minutes=5)),
        ("recent", NOW - timedelta(hours=2)),
        ("overdue", NOW - timedelta(days=3)),
        ("ancient", NOW - timedelta(days=40)),
    ]:
        create(cosmos.states, running(order_id, deadline))
    queried: list[str] = []
    real_page = deadline_index.DeadlineIndex.page

    def counted_page(
        index: deadline_index.DeadlineIndex, bucket: str, **kwargs: Any
    ) -> tuple[list[dict[str, Any]], str | None]:
        queried.append(bucket)
        return real_page(index, bucket, **kwargs)

    monkeypatch.setattr(deadline_index.DeadlineIndex, "page", counted_page)
    before = cosmos.metrics.snapshot().get(OperationKind.QUERY)

    report = catch_up(
        cosmos.states,
        NOW,
        policy=settings.supervisor_policy,
        timeouts=settings.timeouts,
    )

    assert [r.record.order_id for r in report.recoveries] == ["overdue"]
    assert report.beyond_window is not None
    assert [r.record.order_id for r in report.beyond_window.recoveries] == ["ancient"]
    assert report.window_start is not None
    assert queried == deadline_index.buckets_between(report.window_start, report.window_end)
    assert len(queried) == 6 * 24
    assert deadline_index.bucket_of(NOW - timedelta(days=1)) not in queried
    assert report.items_read == 1
    assert report.pages <= settings.supervisor_max_pages
    assert report.request_charge > 0
    query = cosmos.metrics.snapshot()[OperationKind.QUERY]
    assert query.items_read - (0 if before is None else before.items_read) == 2
    for order_id in ("live", "recent"):
        assert cosmos.states.get(order_id) is not None
        assert cosmos.state_document(order_id)["ProcessState"] == ProcessState.PROCESSING.value


# --- request charge (U2, C9) ---------------------------------------------------------------


def test_the_catch_up_finds_a_record_older_than_its_window_without_an_index_entry_u2(
    cosmos: Cosmos,
) -> None:
    """Beyond its window the catch-up queries the state records across partitions, not
    the index: a record a year overdue whose index entry is gone is still found, recovered
    and alerted, and what that query cost is in the beyond-window report. With nothing that
    old, the query reads one page that holds nothing, at a charge."""
    for index in range(5):
        create(cosmos.states, running(f"live-{index}", NOW + timedelta(minutes=index + 1)))
        create(cosmos.states, transitions.new_record(f"pending-{index}", None, NOW, STEPS))
    hidden = create(cosmos.states, running("unindexed", NOW - timedelta(days=365)))
    assert hidden.etag is not None
    entry = deadline_index.EntryRef.parse(hidden.etag.partition("#")[2])
    cosmos.container(DEADLINE_INDEX_CONTAINER).delete_item(
        entry.entry_id, partition_key=entry.bucket, timeout=SDK_TIMEOUT
    )

    def catch_up_now() -> SweepReport:
        return catch_up(
            cosmos.states,
            NOW,
            policy=cosmos.settings.supervisor_policy,
            timeouts=cosmos.settings.timeouts,
        )

    report = catch_up_now()

    assert report.recoveries == ()
    beyond = report.beyond_window
    assert beyond is not None
    [found] = beyond.recoveries
    assert (found.record.order_id, found.kind) == ("unindexed", RecoveryKind.RETRY)
    assert [alert.body["kind"] for alert in found.alerts] == ["order-overdue"]
    assert (beyond.pages, beyond.items_read, beyond.writes) == (1, 1, 1)
    assert beyond.request_charge > 0
    assert cosmos.state_document("unindexed")["ProcessState"] == ProcessState.PENDING.value

    quiet = catch_up_now().beyond_window
    assert quiet is not None
    assert (quiet.pages, quiet.items_read, quiet.recoveries) == (1, 0, ())
    assert quiet.request_charge > 0


def test_request_charge_is_recorded_per_operation_kind(cosmos: Cosmos) -> None:
    record = create(cosmos.states, transitions.new_record("o-1", None, NOW, STEPS))
    cosmos.states.get("o-1")
    page = cosmos.states.query_claimable(now=NOW, page_size=10)
    assert page.request_charge > 0
    cosmos.states.replace(transitions.claim(record, now=NOW, claim_deadline=FUTURE))
    cosmos.states.fenced_update(transitions.finish_steps(InstanceId("o-1", 9), LAST, now=NOW))
    cosmos.orders.delete("o-1")
    snapshot = cosmos.metrics.snapshot()
    for kind in OperationKind:
        assert snapshot[kind].request_charge > 0, kind


# --- the test server's bugs stay in the launcher -------------------------------------------


def test_the_launched_server_answers_like_cosmos_db_for_missing_items_and_patch_filters(
    cosmos: Cosmos,
) -> None:
    state = cosmos.container("state")
    with pytest.raises(CosmosResourceNotFoundError):
        state.read_item("nope", partition_key="nope", timeout=SDK_TIMEOUT)
    create(cosmos.states, running("o-1", FUTURE))
    with pytest.raises(CosmosAccessConditionFailedError):
        state.patch_item(
            "o-1",
            partition_key="o-1",
            patch_operations=[{"op": "set", "path": "/FailureCount", "value": 5}],
            filter_predicate="FROM c WHERE c.LockedBy = 'O-1:1'",
            timeout=SDK_TIMEOUT,
        )
    patched = state.patch_item(
        "o-1",
        partition_key="o-1",
        patch_operations=[{"op": "set", "path": "/FailureCount", "value": 5}],
        filter_predicate="FROM c WHERE c.LockedBy = 'o-1:1'",
        timeout=SDK_TIMEOUT,
    )
    assert patched["FailureCount"] == 5


# --- availability (C4) ---------------------------------------------------------------------


def test_a_store_that_is_down_raises_store_unavailable_and_loses_nothing() -> None:
    with CosmosServer() as server:
        environ = {
            **cosmos_environ(server.connection_string, "down"),
            "COSMOS_RETRY_TOTAL": "1",
            "COSMOS_RETRY_BACKOFF_MAX_SECONDS": "1",
        }
        states, orders = open_cosmos_stores(
            bootstrap.cosmos_options(Settings.from_environ(environ)), environ
        )
        create(states, transitions.new_record("o-1", None, NOW, STEPS))
        server.stop()
        with pytest.raises(StoreUnavailable, match="cannot be reached"):
            states.get("o-1")
        with pytest.raises(StoreUnavailable):
            states.create(transitions.new_record("o-2", None, NOW, STEPS))
        with pytest.raises(StoreUnavailable):
            orders.get("o-1")
        states.close()
        orders.close()


# --- settings and the composition root -----------------------------------------------------


def test_cosmos_connection_settings_are_checked_before_connecting() -> None:
    """The COSMOS_* values themselves are checked when the settings are read (test_config)."""
    options = bootstrap.cosmos_options(Settings(state_store="cosmos"))
    with pytest.raises(ConnectionSettingsError, match="CosmosConnection"):
        open_cosmos_stores(options, {})
    with pytest.raises(ConnectionSettingsError, match="AccountEndpoint"):
        open_cosmos_stores(options, {"CosmosConnection": "nonsense"})


def test_state_store_cosmos_switches_the_app_to_cosmos(
    cosmos_server: CosmosServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = cosmos_environ(cosmos_server.connection_string, f"app-{uuid.uuid4().hex[:8]}")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    built = bootstrap._build(Settings.from_environ(environ))
    try:
        assert isinstance(built.states, CosmosStateStore)
        assert isinstance(built.orders, CosmosOrderStore)
        created = built.states.create(transitions.new_record("o-1", None, NOW, STEPS))
        assert created.created
        assert built.metrics.total().request_charge > 0
    finally:
        built.states.close()
        built.orders.close()


def test_without_the_npm_server_the_cosmos_tests_fail_saying_run_make_setup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Started from a folder with no node_modules above it, the server is not found.
    monkeypatch.chdir(tmp_path)
    assert node_modules_with(cosmos_server_module.PACKAGE) is None
    with pytest.raises(
        CosmosServerMissing, match=r"npm install @vercel/cosmosdb-server.*make setup"
    ):
        CosmosServer().start()
