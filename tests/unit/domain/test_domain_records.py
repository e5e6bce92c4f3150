"""State record shape, steps, timestamps and instance ids (S4, D2, C1, C3, C7, C10)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from domain.records import (
    CompletedStep,
    InstanceId,
    Owed,
    OwedKind,
    OwedMessage,
    ProcessState,
    RecordFormatError,
    StateRecord,
    StepState,
    StepStatus,
    format_utc,
    parse_utc,
)

T0 = datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)


def a_record(**changes: object) -> StateRecord:
    fields: dict[str, object] = {
        "order_id": "order-1",
        "process_state": ProcessState.PROCESSING,
        "locked_by": "order-1:2",
        "complete_by": T0 + timedelta(seconds=30),
        "failure_count": 1,
        "reply_to": "replies-a",
        "attempt": 2,
        "created_at": T0,
        "updated_at": T0,
        "current_step": "fulfil",
        "last_error": None,
        "compensation_log": (CompletedStep("reserve-stock", "res-17", T0),),
        "workflow_version": 1,
        "steps": (
            StepStatus("reserve-stock", StepState.COMPLETED, None, "res-17"),
            StepStatus("charge-payment", StepState.RUNNING, T0 + timedelta(seconds=30)),
            StepStatus("ship-order"),
        ),
    }
    fields.update(changes)
    return StateRecord(**fields)  # type: ignore[arg-type]


def test_utc_text_is_fixed_width_so_string_order_is_time_order() -> None:
    moments = [T0, T0.replace(microsecond=0), T0 + timedelta(days=400), T0 - timedelta(hours=7)]
    texts = [format_utc(moment) for moment in moments]
    assert len({len(text) for text in texts}) == 1
    assert sorted(texts) == [format_utc(moment) for moment in sorted(moments)]
    assert format_utc(T0) == "2026-03-04T05:06:07.890000Z"


def test_utc_text_converts_other_offsets_and_round_trips() -> None:
    east = T0.astimezone(timezone(timedelta(hours=2)))
    assert format_utc(east) == format_utc(T0)
    assert parse_utc(format_utc(T0)) == T0
    assert parse_utc("2026-03-04T07:06:07.89+02:00") == T0


def test_naive_and_malformed_timestamps_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        format_utc(datetime(2026, 1, 1))
    with pytest.raises(RecordFormatError, match="offset"):
        parse_utc("2026-01-01T00:00:00")
    with pytest.raises(RecordFormatError, match="ISO-8601"):
        parse_utc("yesterday")


def test_instance_id_is_order_id_and_attempt_d2() -> None:
    instance = InstanceId("order-1", 3)
    assert str(instance) == "order-1:3"
    assert InstanceId.parse("order-1:3") == instance
    assert InstanceId.parse("a.b_c-9:12") == InstanceId("a.b_c-9", 12)


@pytest.mark.parametrize("text", ["order-1", "order-1:", ":3", "order-1:x", "order-1:0", "a:b:1"])
def test_malformed_instance_ids_are_refused(text: str) -> None:
    with pytest.raises(RecordFormatError):
        InstanceId.parse(text)


def test_document_uses_the_contract_field_names() -> None:
    document = a_record().to_document()
    contract = {
        "id",
        "OrderID",
        "LockedBy",
        "CompleteBy",
        "ProcessState",
        "FailureCount",
        "ReplyTo",
        "SchemaVersion",
    }
    assert contract <= document.keys()
    assert document["id"] == document["OrderID"] == "order-1"
    assert document["ProcessState"] == "Processing"
    assert document["CompleteBy"] == "2026-03-04T05:06:37.890000Z"
    assert document["SchemaVersion"] == 1
    assert document["WorkflowVersion"] == 1
    assert document["Steps"] == [
        {"Name": "reserve-stock", "State": "Completed", "CompleteBy": None, "Reference": "res-17"},
        {
            "Name": "charge-payment",
            "State": "Running",
            "CompleteBy": "2026-03-04T05:06:37.890000Z",
            "Reference": None,
        },
        {"Name": "ship-order", "State": "NotStarted", "CompleteBy": None, "Reference": None},
    ]
    assert document["CompensationLog"] == [
        {
            "Step": "reserve-stock",
            "Reference": "res-17",
            "CompletedAt": "2026-03-04T05:06:07.890000Z",
        }
    ]


def test_document_round_trips_and_keeps_the_etag_apart() -> None:
    record = a_record(complete_by=None, locked_by=None, reply_to=None)
    restored = StateRecord.from_document(record.to_document(), etag="e1")
    assert restored == record
    assert restored.etag == "e1"
    assert "etag" not in record.to_document()


def test_the_submission_trace_context_is_kept_and_optional_c9() -> None:
    """The record keeps the W3C traceparent of its submission (TraceParent) so the starter
    and the supervisor join the order's trace; a submission without one keeps None."""
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    record = replace(a_record(), trace_parent=parent)
    document = record.to_document()
    assert document["TraceParent"] == parent
    assert StateRecord.from_document(document) == record
    document["TraceParent"] = None
    assert StateRecord.from_document(document).trace_parent is None


def test_the_outbox_round_trips_and_a_document_written_before_it_owes_nothing_c6() -> None:
    """`Owed` keeps what a committed transition still owes, each entry enough to rebuild
    its message; SchemaVersion 1 documents written before the outbox have no such field."""
    owed = Owed(
        T0,
        (
            OwedMessage(OwedKind.STATUS, "failed", 2, T0, "MAX_FAILURES=3 reached"),
            OwedMessage(OwedKind.ALERT, "order-error", 2, T0, "MAX_FAILURES=3 reached"),
            OwedMessage(OwedKind.STATUS, "in-progress", 2, T0, None, "reserve-stock"),
            OwedMessage(OwedKind.COMPENSATION, "start", 3, T0),
        ),
    )
    record = a_record(owed=owed)
    document = record.to_document()
    assert document["Owed"]["Due"] == "2026-03-04T05:06:07.890000Z"
    assert document["Owed"]["Messages"][3] == {
        "Kind": "compensation",
        "Name": "start",
        "Attempt": 3,
        "At": "2026-03-04T05:06:07.890000Z",
        "Reason": None,
        "Step": None,
    }
    assert StateRecord.from_document(document) == record
    assert a_record().to_document()["Owed"] is None
    del document["Owed"]
    assert StateRecord.from_document(document).owed is None


def test_what_a_compensation_ends_in_is_kept_and_defaults_to_compensated_c7_u4() -> None:
    """CompensationEndsIn survives the store; a document written before it existed (same
    SchemaVersion) reads as an ordinary compensation's Compensated."""
    record = a_record(
        process_state=ProcessState.COMPENSATING, compensation_ends_in=ProcessState.ERROR
    )
    document = record.to_document()
    assert document["CompensationEndsIn"] == "Error"
    assert StateRecord.from_document(document) == record
    del document["CompensationEndsIn"]
    older = StateRecord.from_document(document)
    assert older.compensation_ends_in is ProcessState.COMPENSATED


def test_a_tombstone_keeps_its_body_hash_and_retirement_and_older_documents_lack_them_c3() -> None:
    """BodyHash and RetiredAt survive the store; a document written before them (same
    SchemaVersion) reads as a record with no hash that is not retired."""
    record = a_record(
        process_state=ProcessState.PROCESSED,
        body_hash="ab" * 32,
        retired_at=datetime(2026, 9, 1, tzinfo=UTC),
    )
    document = record.to_document()
    assert (document["BodyHash"], document["RetiredAt"]) == (
        "ab" * 32,
        "2026-09-01T00:00:00.000000Z",
    )
    assert StateRecord.from_document(document) == record
    del document["BodyHash"], document["RetiredAt"]
    older = StateRecord.from_document(document)
    assert (older.body_hash, older.retired_at) == (None, None)


def test_unknown_schema_version_is_refused_c7() -> None:
    document = a_record().to_document()
    document["SchemaVersion"] = 2
    with pytest.raises(RecordFormatError, match="SchemaVersion 2"):
        StateRecord.from_document(document)


def test_an_attempt_resumes_at_the_first_step_not_completed_c10() -> None:
    record = a_record()
    assert record.resume_at == 1
    done = tuple(StepStatus(step.name, StepState.COMPLETED) for step in record.steps)
    assert a_record(steps=done).resume_at is None
    assert record.step_index("ship-order") == 2
    with pytest.raises(RecordFormatError, match="no step 'fly'"):
        record.step_index("fly")


def test_missing_or_malformed_fields_name_the_record() -> None:
    document = a_record().to_document()
    del document["FailureCount"]
    with pytest.raises(RecordFormatError, match="'order-1' lacks field 'FailureCount'"):
        StateRecord.from_document(document)
    document = a_record().to_document()
    document["ProcessState"] = "Running"
    with pytest.raises(RecordFormatError, match="'order-1' is malformed"):
        StateRecord.from_document(document)


def test_instance_id_of_a_record_comes_from_locked_by() -> None:
    assert a_record().instance_id == InstanceId("order-1", 2)
    assert a_record(locked_by=None).instance_id is None
