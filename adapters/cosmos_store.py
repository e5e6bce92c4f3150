"""Cosmos DB adapters of the `StateStore` and `OrderStore` ports (S2, D1, D3, D4, E5, U1-U3, C6).

`open_cosmos_stores` (STATE_STORE=cosmos) opens `CosmosStateStore` and `CosmosOrderStore`
over one client. Each state write is one conditional request on the record plus the upkeep
of its deadline index entry (`adapters.deadline_index`), which `query_expired` reads; the
other queries are cross-partition queries with plain filters. The request charge of every
port call is recorded in `StoreMetrics`. Design: docs/architecture.md, "The stores".
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from azure.core import MatchConditions
from azure.cosmos import ContainerProxy, CosmosClient
from azure.cosmos.exceptions import (
    CosmosAccessConditionFailedError,
    CosmosResourceExistsError,
    CosmosResourceNotFoundError,
)

from adapters import deadline_index
from adapters.cosmos_connection import (
    CosmosOptions,
    RequestCharge,
    connect,
    first_page,
    translate_errors,
)
from adapters.cosmos_containers import cosmos_layout, ensure_containers
from adapters.deadline_index import DeadlineIndex, EntryRef
from domain.contracts import Order
from domain.dead_letters import WatchMark
from domain.ports import (
    Created,
    InvalidContinuation,
    OperationKind,
    OrderStore,
    Page,
    PreconditionFailed,
    RecordNotFound,
    StateStore,
    StoreMetrics,
)
from domain.records import RETIRABLE_STATES, ProcessState, StateRecord, format_utc, parse_utc
from domain.transitions import KEEP, DocumentPath, FencedChange

MAX_PAGE_SIZE = 1000
MAX_FETCHES_PER_PAGE = 100
"""SDK requests one `query_*` call may make (empty buckets included) before it returns
a shorter page with a continuation token."""

MAX_PATCH_OPERATIONS = 10
"""Cosmos DB applies at most ten operations in one patch."""

ENTRY_FIELD = "DeadlineEntry"
PREVIOUS_ENTRY_FIELD = "PreviousDeadlineEntry"
_VERSION_SEPARATOR = "#"

_CLAIMABLE_QUERY = (
    "SELECT * FROM c WHERE c.ProcessState = @pending AND IS_NULL(c.LockedBy) "
    "AND (IS_NULL(c.CompleteBy) OR c.CompleteBy <= @now)"
)

# The supervisor's last resort for deadlines older than every window (U2): the state records
# themselves, across partitions. A plain filter, so it pages with continuation tokens; the
# composite index on ProcessState + CompleteBy serves it, so a query that finds nothing
# costs about one index lookup per physical partition.
_EXPIRED_UNTIL_QUERY = (
    "SELECT * FROM c WHERE c.ProcessState IN (@processing, @compensating) "
    "AND c.CompleteBy <= @until"
)

# The relay's outboxes due (C6): a plain filter on the range index of Owed.Due, so it pages
# across partitions and reads only records that owe something (documents without an outbox
# have no Owed.Due, which no comparison matches).
_OWED_QUERY = "SELECT * FROM c WHERE c.Owed.Due <= @until"

# An operator's list of one state (E8, C2): a plain filter, so it pages across partitions.
_BY_STATE_QUERY = "SELECT * FROM c WHERE c.ProcessState = @state"

# Finished records past the retention and not yet tombstones (C3), and any record that still
# carries a `ttl` from before records became tombstones. RetiredAt is null or, in documents
# written before the field, missing.
_RETIRABLE_QUERY = (
    "SELECT * FROM c WHERE IS_DEFINED(c.ttl) OR (c.ProcessState IN ({states}) "
    "AND c.UpdatedAt < @until AND (NOT IS_DEFINED(c.RetiredAt) OR IS_NULL(c.RetiredAt)))"
)

# One aggregate over the state container's index each: its cost grows with the records it
# counts, which the bound it serves keeps bounded - the running cap, the backlog bound (C5).
_COUNT_QUERY = "SELECT VALUE COUNT(1) FROM c WHERE c.ProcessState IN ({states})"
_OLDEST_QUERY = "SELECT VALUE MIN(c.UpdatedAt) FROM c WHERE c.ProcessState = @state"
_RUNNING_STATES = (ProcessState.PROCESSING, ProcessState.COMPENSATING)
_BACKLOG_STATES = (ProcessState.PENDING, *_RUNNING_STATES)
_RETIRABLE_STATES = tuple(sorted(RETIRABLE_STATES))


def _encode_token(query: str, position: Mapping[str, Any]) -> str:
    raw = json.dumps({"q": query, **position}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_token(token: str, query: str) -> dict[str, Any]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        valid = (
            isinstance(decoded, dict)
            and decoded.get("q") == query
            and isinstance(decoded.get("c"), str | None)
        )
    except (ValueError, binascii.Error):
        valid = False
    if not valid:
        raise InvalidContinuation(
            f"continuation token {token!r} was not issued by the {query} query of this store"
        )
    return dict(decoded)


def _version(document: Mapping[str, Any]) -> str:
    """The etag this adapter hands out: Cosmos's `_etag`, then the version's index entry."""
    entry = document.get(ENTRY_FIELD)
    etag = str(document["_etag"])
    return etag if entry is None else f"{etag}{_VERSION_SEPARATOR}{entry}"


def _parse_version(version: str) -> tuple[str, EntryRef | None]:
    etag, separator, entry = version.partition(_VERSION_SEPARATOR)
    if not separator:
        return etag, None
    try:
        return etag, EntryRef.parse(entry)
    except ValueError:
        return version, None


def _record(document: Mapping[str, Any]) -> StateRecord:
    return StateRecord.from_document(document, etag=_version(document))


def _literal(value: str) -> str:
    """A Cosmos SQL string literal (JSON string syntax is valid Cosmos SQL)."""
    return json.dumps(value)


def _patch_path(path: DocumentPath) -> str:
    """A document path as a Cosmos DB patch path: ``("Steps", 1)`` -> ``/Steps/1``."""
    return "".join(f"/{part}" for part in path)


def _fence_predicate(change: FencedChange) -> str:
    states = ", ".join(_literal(state.value) for state in sorted(change.allowed_states))
    step_guard = ""
    if change.step_guard is not None:
        index, step_state = change.step_guard
        step_guard = f" AND c.Steps[{int(index)}].State = {_literal(step_state.value)}"
    return (
        f"FROM c WHERE c.LockedBy = {_literal(change.locked_by)} AND c.ProcessState IN ({states})"
        f"{step_guard}"
    )


class _SharedClient:
    """One CosmosClient (one connection pool) for both stores; closed with the last one."""

    def __init__(self, client: CosmosClient, users: int) -> None:
        self.client = client
        self._users = users
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            self.client.close()


class _ClientLease:
    """One store's share of the client; releasing it twice releases it once."""

    def __init__(self, shared: _SharedClient) -> None:
        self._shared: _SharedClient | None = shared

    def release(self) -> None:
        shared, self._shared = self._shared, None
        if shared is not None:
            shared.release()


class CosmosStateStore(StateStore):
    """The state store in the `state` container, with its deadline index (U3)."""

    def __init__(
        self,
        lease: _ClientLease,
        state: ContainerProxy,
        index: DeadlineIndex,
        options: CosmosOptions,
        metrics: StoreMetrics,
    ) -> None:
        self._lease = lease
        self._state = state
        self._index = index
        self._options = options
        self._timeout = options.operation_timeout_seconds
        self.metrics = metrics

    @property
    def max_page_size(self) -> int:
        return MAX_PAGE_SIZE

    def _add_entry(
        self,
        order_id: str,
        state: ProcessState,
        complete_by: str | None,
        basis: dict[str, Any],
        charge: RequestCharge,
    ) -> EntryRef | None:
        if complete_by is None or not deadline_index.needs_entry(state, complete_by):
            return None
        return self._index.add(order_id, complete_by, state, basis, charge)

    def _remove_entry(self, ref: EntryRef | None, charge: RequestCharge) -> None:
        if ref is not None:
            self._index.remove(ref, charge)

    def create(self, record: StateRecord) -> Created[StateRecord]:
        charge = RequestCharge()
        # No `ttl`: a finished record stays, as the tombstone of its order (C3, S2).
        document = record.to_document()
        with translate_errors(f"creating state record {record.order_id!r}", charge):
            ref = self._add_entry(
                record.order_id,
                record.process_state,
                document["CompleteBy"],
                deadline_index.create_basis(),
                charge,
            )
            document[ENTRY_FIELD] = None if ref is None else str(ref)
            try:
                stored = self._state.create_item(
                    document, response_hook=charge.hook, timeout=self._timeout
                )
            except CosmosResourceExistsError as conflict:
                charge.add_from(conflict.headers)
                self._remove_entry(ref, charge)
                existing = self._read(record.order_id, charge)
                self.metrics.record(
                    OperationKind.CREATE, writes=1, reads=1, request_charge=charge.total
                )
                if existing is None:
                    raise RecordNotFound(
                        f"state record {record.order_id!r} conflicted on create but cannot be read"
                    ) from None
                return Created(_record(existing), created=False)
        self.metrics.record(OperationKind.CREATE, writes=1, request_charge=charge.total)
        return Created(_record(stored), created=True)

    def get(self, order_id: str) -> StateRecord | None:
        charge = RequestCharge()
        with translate_errors(f"reading state record {order_id!r}", charge):
            document = self._read(order_id, charge)
        self.metrics.record(OperationKind.READ, reads=1, request_charge=charge.total)
        return None if document is None else _record(document)

    def _read(self, order_id: str, charge: RequestCharge) -> dict[str, Any] | None:
        return _point_read(self._state, order_id, charge, self._timeout)

    def replace(self, record: StateRecord) -> StateRecord:
        if record.etag is None:
            raise ValueError(
                f"replace of state record {record.order_id!r} needs the etag it was read with"
            )
        etag, previous = _parse_version(record.etag)
        charge = RequestCharge()
        document = record.to_document()
        with translate_errors(f"replacing state record {record.order_id!r}", charge):
            ref = self._add_entry(
                record.order_id,
                record.process_state,
                document["CompleteBy"],
                deadline_index.etag_basis(etag),
                charge,
            )
            document[ENTRY_FIELD] = None if ref is None else str(ref)
            try:
                stored = self._state.replace_item(
                    record.order_id,
                    document,
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified,
                    response_hook=charge.hook,
                    timeout=self._timeout,
                )
            except (CosmosAccessConditionFailedError, CosmosResourceNotFoundError) as refused:
                charge.add_from(refused.headers)
                self._remove_entry(ref, charge)
                self.metrics.record(
                    OperationKind.REPLACE, writes=1, refused=1, request_charge=charge.total
                )
                if isinstance(refused, CosmosResourceNotFoundError):
                    raise RecordNotFound(
                        f"state record {record.order_id!r} does not exist"
                    ) from None
                raise PreconditionFailed(record.order_id, record.etag) from None
            if previous != ref:
                self._remove_entry(previous, charge)
        self.metrics.record(OperationKind.REPLACE, writes=1, request_charge=charge.total)
        return _record(stored)

    def fenced_update(self, change: FencedChange) -> StateRecord | None:
        sets_deadline = change.complete_by is not KEEP
        if change.process_state is not KEEP and not sets_deadline:
            raise ValueError(
                f"{change.action} of order {change.order_id!r} sets ProcessState without "
                "CompleteBy; the deadline index needs both to stay in step"
            )
        sets = dict(change.document_sets())
        operations: list[dict[str, Any]] = [
            {"op": "set", "path": _patch_path(path), "value": value} for path, value in sets.items()
        ]
        operations += [
            {"op": "incr", "path": _patch_path(path), "value": amount}
            for path, amount in change.document_increments()
        ]
        appended = change.document_append()
        if appended is not None:
            path, value = appended
            operations.append({"op": "add", "path": f"{_patch_path(path)}/-", "value": value})
        new_state = None if change.process_state is KEEP else change.process_state
        needed = len(operations) + (2 if sets_deadline else 0)
        if needed > MAX_PATCH_OPERATIONS:
            raise ValueError(
                f"{change.action} of order {change.order_id!r} needs {needed} patch "
                f"operations; Cosmos DB applies at most {MAX_PATCH_OPERATIONS}"
            )
        charge = RequestCharge()
        with translate_errors(f"{change.action} of order {change.order_id!r}", charge):
            ref = None
            if sets_deadline:
                # Without a ProcessState of its own, the change keeps one of the states its
                # guard allows.
                states_after = (
                    [new_state] if new_state is not None else sorted(change.allowed_states)
                )
                indexed = [s for s in states_after if s in deadline_index.INDEXED_STATES]
                if indexed:
                    ref = self._add_entry(
                        change.order_id,
                        indexed[0],
                        sets[("CompleteBy",)],
                        deadline_index.fence_basis(change.locked_by, change.allowed_states),
                        charge,
                    )
                operations += [
                    {"op": "move", "from": f"/{ENTRY_FIELD}", "path": f"/{PREVIOUS_ENTRY_FIELD}"},
                    {
                        "op": "set",
                        "path": f"/{ENTRY_FIELD}",
                        "value": None if ref is None else str(ref),
                    },
                ]
            try:
                stored = self._state.patch_item(
                    change.order_id,
                    partition_key=change.order_id,
                    patch_operations=operations,
                    filter_predicate=_fence_predicate(change),
                    response_hook=charge.hook,
                    timeout=self._timeout,
                )
            except (CosmosAccessConditionFailedError, CosmosResourceNotFoundError) as refused:
                charge.add_from(refused.headers)
                self._remove_entry(ref, charge)
                self.metrics.record(
                    OperationKind.FENCED_UPDATE, writes=1, refused=1, request_charge=charge.total
                )
                return None
            if sets_deadline:
                previous = stored.get(PREVIOUS_ENTRY_FIELD)
                if previous is not None and previous != stored.get(ENTRY_FIELD):
                    self._remove_entry(EntryRef.parse(str(previous)), charge)
        self.metrics.record(OperationKind.FENCED_UPDATE, writes=1, request_charge=charge.total)
        return _record(stored)

    def query_retirable(
        self, *, until: datetime, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        """A cross-partition query in the server's order, like `query_expired_until`; it
        also serves every record with a `ttl` of an older version of this adapter, which
        would otherwise vanish when it runs out (C3)."""
        names = [f"@state{index}" for index in range(len(_RETIRABLE_STATES))]
        return self._filtered_page(
            _RETIRABLE_QUERY.format(states=", ".join(names)),
            [
                *(
                    {"name": name, "value": state.value}
                    for name, state in zip(names, _RETIRABLE_STATES, strict=True)
                ),
                {"name": "@until", "value": format_utc(until)},
            ],
            query="retirable",
            doing="querying state records to retire",
            page_size=page_size,
            continuation=continuation,
        )

    def query_claimable(
        self, *, now: datetime, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        return self._filtered_page(
            _CLAIMABLE_QUERY,
            [
                {"name": "@pending", "value": ProcessState.PENDING.value},
                {"name": "@now", "value": format_utc(now)},
            ],
            query="claimable",
            doing="querying claimable state records",
            page_size=page_size,
            continuation=continuation,
        )

    def query_expired_until(
        self, *, until: datetime, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        """A cross-partition query of the state container, not of the deadline index (U2):
        it finds a record even if no index entry leads to it. Without ORDER BY (which would
        lose the gateway's continuation across partitions) the records come in the
        server's order; the supervisor recovers each one it reads, so the next scan finds
        the rest whatever the order."""
        return self._filtered_page(
            _EXPIRED_UNTIL_QUERY,
            [
                {"name": "@processing", "value": ProcessState.PROCESSING.value},
                {"name": "@compensating", "value": ProcessState.COMPENSATING.value},
                {"name": "@until", "value": format_utc(until)},
            ],
            query="expired-until",
            doing="querying state records expired before the supervisor's windows",
            page_size=page_size,
            continuation=continuation,
        )

    def query_owed(
        self, *, until: datetime, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        return self._filtered_page(
            _OWED_QUERY,
            [{"name": "@until", "value": format_utc(until)}],
            query="owed",
            doing="querying state records that still owe messages",
            page_size=page_size,
            continuation=continuation,
        )

    def query_by_state(
        self, *, state: ProcessState, page_size: int, continuation: str | None = None
    ) -> Page[StateRecord]:
        return self._filtered_page(
            _BY_STATE_QUERY,
            [{"name": "@state", "value": state.value}],
            query=f"by-state:{state.value}",
            doing=f"listing {state.value} state records",
            page_size=page_size,
            continuation=continuation,
        )

    def _filtered_page(
        self,
        sql: str,
        parameters: list[dict[str, Any]],
        *,
        query: str,
        doing: str,
        page_size: int,
        continuation: str | None,
    ) -> Page[StateRecord]:
        """One page of a cross-partition query with a plain filter, filled from as many SDK
        pages as that takes; our token wraps the SDK's and names `query`."""
        limit = self.page_limit(page_size)
        token = None if continuation is None else _decode_token(continuation, query)["c"]
        charge = RequestCharge()
        documents: list[dict[str, Any]] = []
        with translate_errors(doing, charge):
            for _ in range(MAX_FETCHES_PER_PAGE):
                page, next_token = first_page(
                    self._state.query_items(
                        sql,
                        parameters=parameters,
                        enable_cross_partition_query=True,
                        max_item_count=limit - len(documents),
                        response_hook=charge.hook,
                        timeout=self._timeout,
                    ),
                    token,
                )
                documents += page
                previous, token = token, next_token
                if token is None or token == previous or len(documents) >= limit:
                    break
        self.metrics.record(
            OperationKind.QUERY, reads=1, items_read=len(documents), request_charge=charge.total
        )
        return Page(
            tuple(_record(document) for document in documents),
            None if token is None else _encode_token(query, {"c": token}),
            charge.total,
        )

    def query_expired(
        self,
        *,
        window_start: datetime,
        now: datetime,
        page_size: int,
        continuation: str | None = None,
    ) -> Page[StateRecord]:
        limit = self.page_limit(page_size)
        buckets = deadline_index.buckets_between(window_start, now)
        token: str | None = None
        if continuation is not None:
            position = _decode_token(continuation, "expired")
            bucket = position.get("b")
            if not isinstance(bucket, str):
                raise InvalidContinuation(f"continuation token {continuation!r} names no bucket")
            token = position["c"] if bucket in buckets else None
            buckets = [candidate for candidate in buckets if candidate >= bucket]
        charge = RequestCharge()
        records: list[StateRecord] = []
        entries_read = 0
        with translate_errors("sweeping the deadline index for expired records", charge):
            for _ in range(MAX_FETCHES_PER_PAGE):
                if not buckets or len(records) >= limit:
                    break
                entries, token = self._index.page(
                    buckets[0],
                    window_start=window_start,
                    now=now,
                    max_items=limit - len(records),
                    continuation=token,
                    charge=charge,
                )
                entries_read += len(entries)
                for entry in entries:
                    record = self._recheck(entry, window_start, now, charge)
                    if record is not None:
                        records.append(record)
                if token is None:
                    buckets.pop(0)
        self.metrics.record(
            OperationKind.QUERY, reads=1, items_read=entries_read, request_charge=charge.total
        )
        next_page = None if not buckets else _encode_token("expired", {"b": buckets[0], "c": token})
        return Page(tuple(records), next_page, charge.total)

    def count_running(self, *, at_most: int) -> int:
        return self._count_in(_RUNNING_STATES, at_most, "counting running state records")

    def count_pending(self, *, at_most: int) -> int:
        return self._count_in((ProcessState.PENDING,), at_most, "counting pending state records")

    def count_backlog(self, *, at_most: int) -> int:
        return self._count_in(_BACKLOG_STATES, at_most, "counting the backlog of state records")

    def oldest_pending_since(self) -> datetime | None:
        charge = RequestCharge()
        with translate_errors("reading the oldest pending state record", charge):
            oldest: list[Any] = list(
                self._state.query_items(
                    _OLDEST_QUERY,
                    parameters=[{"name": "@state", "value": ProcessState.PENDING.value}],
                    enable_cross_partition_query=True,
                    response_hook=charge.hook,
                    timeout=self._timeout,
                )
            )
        self.metrics.record(OperationKind.QUERY, reads=1, request_charge=charge.total)
        # UpdatedAt is fixed-width UTC text, so the earliest text is the earliest moment. No
        # value at all when nothing is Pending; one per partition where the server does not
        # aggregate across them.
        found = [str(value) for value in oldest if value is not None]
        return parse_utc(min(found)) if found else None

    def _count_in(self, states: tuple[ProcessState, ...], at_most: int, doing: str) -> int:
        if at_most <= 0:
            return 0
        names = [f"@state{index}" for index in range(len(states))]
        charge = RequestCharge()
        with translate_errors(doing, charge):
            counts: list[Any] = list(
                self._state.query_items(
                    _COUNT_QUERY.format(states=", ".join(names)),
                    parameters=[
                        {"name": name, "value": state.value}
                        for name, state in zip(names, states, strict=True)
                    ],
                    enable_cross_partition_query=True,
                    response_hook=charge.hook,
                    timeout=self._timeout,
                )
            )
        self.metrics.record(OperationKind.QUERY, reads=1, request_charge=charge.total)
        # One value, or one per partition where the server does not aggregate across them.
        return min(sum(int(count) for count in counts), at_most)

    def _recheck(
        self,
        entry: Mapping[str, Any],
        window_start: datetime,
        now: datetime,
        charge: RequestCharge,
    ) -> StateRecord | None:
        """The state record an entry points at, if it is running past that deadline."""
        document = self._read(str(entry["OrderID"]), charge)
        if document is not None and document.get(ENTRY_FIELD) == deadline_index.entry_ref(entry):
            record = _record(document)
            deadline = record.complete_by
            running = record.process_state in deadline_index.INDEXED_STATES
            if running and deadline is not None and window_start <= deadline <= now:
                return record
            return None
        if deadline_index.entry_is_dead(entry, document):
            self._index.remove(EntryRef(str(entry["bucket"]), str(entry["id"])), charge)
        return None

    def load_watch_mark(self, name: str) -> WatchMark:
        charge = RequestCharge()
        with translate_errors(f"reading watch mark {name!r}", charge):
            document = _point_read(self._state, _watch_id(name), charge, self._timeout)
        self.metrics.record(OperationKind.READ, reads=1, request_charge=charge.total)
        return WatchMark() if document is None else WatchMark.from_document(document["WatchMark"])

    def save_watch_mark(self, name: str, mark: WatchMark) -> None:
        charge = RequestCharge()
        key = _watch_id(name)
        document = {"id": key, "OrderID": key, "WatchMark": mark.to_document()}
        with translate_errors(f"writing watch mark {name!r}", charge):
            self._state.upsert_item(document, response_hook=charge.hook, timeout=self._timeout)
        self.metrics.record(OperationKind.REPLACE, writes=1, request_charge=charge.total)

    def close(self) -> None:
        self._lease.release()


def _watch_id(name: str) -> str:
    return f"$watch:{name}"


class CosmosOrderStore(OrderStore):
    """The orders database in the `orders` container (S2)."""

    def __init__(
        self,
        lease: _ClientLease,
        orders: ContainerProxy,
        options: CosmosOptions,
        metrics: StoreMetrics,
    ) -> None:
        self._lease = lease
        self._orders = orders
        self._timeout = options.operation_timeout_seconds
        self.metrics = metrics

    def create(self, order: Order) -> Created[Order]:
        charge = RequestCharge()
        document = order.to_document()
        with translate_errors(f"creating order {order.order_id!r}", charge):
            try:
                self._orders.create_item(document, response_hook=charge.hook, timeout=self._timeout)
            except CosmosResourceExistsError as conflict:
                charge.add_from(conflict.headers)
                existing = self._read(order.order_id, charge)
                self.metrics.record(
                    OperationKind.CREATE, writes=1, reads=1, request_charge=charge.total
                )
                if existing is None:
                    raise RecordNotFound(
                        f"order {order.order_id!r} conflicted on create but is missing"
                    ) from None
                return Created(existing, created=False)
        self.metrics.record(OperationKind.CREATE, writes=1, request_charge=charge.total)
        return Created(order, created=True)

    def get(self, order_id: str) -> Order | None:
        charge = RequestCharge()
        with translate_errors(f"reading order {order_id!r}", charge):
            order = self._read(order_id, charge)
        self.metrics.record(OperationKind.READ, reads=1, request_charge=charge.total)
        return order

    def delete(self, order_id: str) -> bool:
        charge = RequestCharge()
        with translate_errors(f"deleting order {order_id!r}", charge):
            try:
                self._orders.delete_item(
                    order_id,
                    partition_key=order_id,
                    response_hook=charge.hook,
                    timeout=self._timeout,
                )
            except CosmosResourceNotFoundError as missing:
                charge.add_from(missing.headers)
                deleted = False
            else:
                deleted = True
        self.metrics.record(OperationKind.DELETE, writes=1, request_charge=charge.total)
        return deleted

    def _read(self, order_id: str, charge: RequestCharge) -> Order | None:
        document = _point_read(self._orders, order_id, charge, self._timeout)
        return None if document is None else Order.from_document(document)

    def close(self) -> None:
        self._lease.release()


def _point_read(
    container: ContainerProxy, order_id: str, charge: RequestCharge, timeout: float
) -> dict[str, Any] | None:
    """The document with id and partition key ``order_id``, or None (its charge counted)."""
    try:
        document: dict[str, Any] = container.read_item(
            order_id, partition_key=order_id, response_hook=charge.hook, timeout=timeout
        )
    except CosmosResourceNotFoundError as missing:
        charge.add_from(missing.headers)
        return None
    return document


def open_cosmos_stores(
    options: CosmosOptions, environ: Mapping[str, str], metrics: StoreMetrics | None = None
) -> tuple[CosmosStateStore, CosmosOrderStore]:
    """Both Cosmos stores, creating missing containers with a key.

    `options` names the database and containers and sets retries and timeouts;
    `environ` supplies the connection: CosmosConnection (or CosmosConnection__accountEndpoint).
    """
    shared_metrics = metrics if metrics is not None else StoreMetrics()
    layout = cosmos_layout(options)
    client, keyed = connect(environ, options)
    try:
        with translate_errors(f"opening Cosmos DB database {layout.database!r}"):
            database = (
                ensure_containers(client, layout)
                if keyed
                else client.get_database_client(layout.database)
            )
    except BaseException:
        client.close()
        raise
    shared = _SharedClient(client, users=2)
    states = CosmosStateStore(
        _ClientLease(shared),
        database.get_container_client(layout.state.name),
        DeadlineIndex(
            database.get_container_client(layout.deadlines.name),
            options.operation_timeout_seconds,
        ),
        options,
        shared_metrics,
    )
    orders = CosmosOrderStore(
        _ClientLease(shared),
        database.get_container_client(layout.orders.name),
        options,
        shared_metrics,
    )
    return states, orders
