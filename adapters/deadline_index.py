"""The supervisor's recovery index in Cosmos DB: running records' deadlines by time bucket (U2, U3).

`DeadlineIndex` adds, removes and pages the entries of one `bucket`, a CompleteBy truncated
to `BUCKET_SECONDS`. Entries are hints: `adapters.cosmos_store` re-checks each against its
state record, and `entry_is_dead` says, from the `basis` an entry was written with, when one
its record does not name may be removed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.cosmos import ContainerProxy
from azure.cosmos.exceptions import CosmosResourceNotFoundError

from adapters.cosmos_connection import RequestCharge, first_page
from domain.records import ProcessState, format_utc, parse_utc

BUCKET_SECONDS = 3600
"""Width of a bucket. Part of the stored layout: changing it needs an empty index.

A sweep queries window/width + 1 partitions (25 for the default one-day window), so
wider buckets make cheap sweeps; a bucket is also one logical partition, which bounds
the index's write rate to what one partition takes (about 10,000 RU/s).
"""

INDEXED_STATES = frozenset({ProcessState.PROCESSING, ProcessState.COMPENSATING})
"""States whose CompleteBy the supervisor watches (U1, C2)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def needs_entry(state: ProcessState, complete_by: str | None) -> bool:
    return state in INDEXED_STATES and complete_by is not None


def bucket_of(moment: datetime) -> str:
    """The bucket key of a deadline: its start, as fixed-width sortable UTC text."""
    seconds = int((moment - _EPOCH).total_seconds()) // BUCKET_SECONDS * BUCKET_SECONDS
    return format_utc(_EPOCH + timedelta(seconds=seconds))


def buckets_between(start: datetime, end: datetime) -> list[str]:
    """Every bucket key from the bucket of `start` to the bucket of `end`, oldest first."""
    first, last = parse_utc(bucket_of(start)), parse_utc(bucket_of(end))
    count = int((last - first).total_seconds()) // BUCKET_SECONDS + 1
    return [format_utc(first + timedelta(seconds=BUCKET_SECONDS * n)) for n in range(count)]


@dataclass(frozen=True)
class EntryRef:
    """Where an entry lives: its partition (bucket) and id."""

    bucket: str
    entry_id: str

    def __str__(self) -> str:
        return f"{self.bucket}|{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> EntryRef:
        bucket, separator, entry_id = text.partition("|")
        if not separator or not bucket or not entry_id:
            raise ValueError(f"not a deadline index reference: {text!r}")
        return cls(bucket, entry_id)


def create_basis() -> dict[str, Any]:
    """The entry serves a create: dead once the record exists."""
    return {"create": True}


def etag_basis(etag: str) -> dict[str, Any]:
    """The entry serves a replace conditional on `etag`: dead once the etag moved on."""
    return {"etag": etag}


def fence_basis(locked_by: str, states: Iterable[ProcessState]) -> dict[str, Any]:
    """The entry serves a fenced patch: dead once its fence no longer holds."""
    return {"lockedBy": locked_by, "states": sorted(state.value for state in states)}


def entry_is_dead(entry: Mapping[str, Any], record: Mapping[str, Any] | None) -> bool:
    """True when the write `entry` was made for can never make `record` name it."""
    if record is not None and record.get("DeadlineEntry") == entry_ref(entry):
        return False
    basis = entry.get("basis") or {}
    if basis.get("create"):
        return record is not None
    if record is None:
        return True
    if "etag" in basis:
        return bool(record.get("_etag") != basis["etag"])
    if "lockedBy" in basis:
        return bool(
            record.get("LockedBy") != basis["lockedBy"]
            or record.get("ProcessState") not in basis.get("states", [])
        )
    return False


def entry_ref(entry: Mapping[str, Any]) -> str:
    return str(EntryRef(str(entry["bucket"]), str(entry["id"])))


_BUCKET_QUERY = (
    "SELECT * FROM e WHERE e.bucket = @bucket AND e.CompleteBy >= @start "
    "AND e.CompleteBy <= @now ORDER BY e.CompleteBy"
)


class DeadlineIndex:
    """Reads and writes the entries of the deadline index container."""

    def __init__(self, container: ContainerProxy, timeout_seconds: float) -> None:
        self._container = container
        self._timeout = timeout_seconds

    def add(
        self,
        order_id: str,
        complete_by: str,
        state: ProcessState,
        basis: dict[str, Any],
        charge: RequestCharge,
    ) -> EntryRef:
        ref = EntryRef(bucket_of(parse_utc(complete_by)), f"{order_id}.{uuid.uuid4().hex}")
        self._container.create_item(
            {
                "id": ref.entry_id,
                "bucket": ref.bucket,
                "OrderID": order_id,
                "CompleteBy": complete_by,
                "ProcessState": state.value,
                "basis": basis,
            },
            response_hook=charge.hook,
            timeout=self._timeout,
        )
        return ref

    def remove(self, ref: EntryRef, charge: RequestCharge) -> None:
        """Delete an entry; one that is gone already is fine (a sweep cleaned it up)."""
        try:
            self._container.delete_item(
                ref.entry_id,
                partition_key=ref.bucket,
                response_hook=charge.hook,
                timeout=self._timeout,
            )
        except CosmosResourceNotFoundError as gone:
            charge.add_from(gone.headers)

    def page(
        self,
        bucket: str,
        *,
        window_start: datetime,
        now: datetime,
        max_items: int,
        continuation: str | None,
        charge: RequestCharge,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of a bucket's entries with window_start <= CompleteBy <= now."""
        return first_page(
            self._container.query_items(
                _BUCKET_QUERY,
                parameters=[
                    {"name": "@bucket", "value": bucket},
                    {"name": "@start", "value": format_utc(window_start)},
                    {"name": "@now", "value": format_utc(now)},
                ],
                partition_key=bucket,
                max_item_count=max_items,
                response_hook=charge.hook,
                timeout=self._timeout,
            ),
            continuation,
        )
