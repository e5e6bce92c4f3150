"""Dead letters as an operator and the watcher see them (S3, E8, DLQ triage): a body
preview with no personal data, the derived message id of a resubmitted copy, and the
watcher's mark, which reports each dead letter once - one numbered below those already
reported included - and stays bounded."""

from __future__ import annotations

import json

from domain.dead_letters import (
    DeadLetter,
    WatchMark,
    resubmitted_message_id,
    summarise_body,
    watch_step,
)


def letter(number: int) -> DeadLetter:
    return DeadLetter(
        queue="orders",
        sequence_number=number,
        message_id=f"m-{number}",
        reason="OrderConflict",
        description="d",
        enqueued_at=None,
        delivery_count=1,
    )


def look(
    mark: WatchMark, numbers: list[int], *, oldest: int | None, complete: bool = True
) -> tuple[list[int], WatchMark]:
    step = watch_step(
        mark,
        oldest_in_source=oldest,
        dead_letters=[letter(n) for n in numbers if n >= mark.next_start],
        complete=complete,
    )
    return [d.sequence_number for d in step.new], step.mark


def test_a_submission_preview_shows_its_keys_and_order_id_and_no_customer_data() -> None:
    body = {"schemaVersion": 1, "orderId": "o-1", "customerId": "alice@example.com", "items": []}
    summary = summarise_body(json.dumps(body).encode())
    assert summary.order_id == "o-1"
    assert (
        summary.preview
        == "JSON object, keys: customerId, items, orderId, schemaVersion; orderId=o-1"
    )
    assert "alice" not in summary.preview


def test_an_agent_message_names_its_order_by_instance_id() -> None:
    summary = summarise_body(b'{"instanceId": "o-7:2", "order": {"customerId": "bob"}}')
    assert summary.order_id == "o-7"
    assert "bob" not in summary.preview


def test_bodies_that_are_not_json_objects_show_only_their_size() -> None:
    assert summarise_body(b"\xff\xfe").preview == "2 bytes, not JSON"
    assert summarise_body(b"[1, 2]").preview == "JSON list, 6 bytes"
    assert summarise_body(b'{"orderId": "not an id!"}').order_id is None


def test_a_resubmitted_copy_gets_a_stable_id_of_at_most_128_characters() -> None:
    assert resubmitted_message_id("o-1", 42) == "o-1:resubmitted:42"
    assert resubmitted_message_id(None, 42) == "-:resubmitted:42"
    long_id = resubmitted_message_id("x" * 128, 42)
    assert len(long_id) <= 128
    assert long_id == resubmitted_message_id("x" * 128, 42)
    assert long_id != resubmitted_message_id("x" * 128, 43)


def test_each_dead_letter_is_reported_once() -> None:
    new, mark = look(WatchMark(), [3, 5], oldest=None)
    assert new == [3, 5]
    assert look(mark, [3, 5], oldest=None)[0] == []
    new, mark = look(mark, [3, 5, 8], oldest=9)
    assert new == [8]
    assert look(mark, [3, 5, 8], oldest=9)[0] == []


def test_a_dead_letter_numbered_below_reported_ones_is_still_reported() -> None:
    """Message 2 is still in its queue while 4 is dead-lettered; 2 exhausts its deliveries
    later. The floor stays at 2, the oldest message of the queue, so 2 is seen then."""
    new, mark = look(WatchMark(), [4], oldest=2)
    assert new == [4]
    assert mark.floor == 2
    new, mark = look(mark, [2, 4], oldest=None)
    assert new == [2]
    assert look(mark, [2, 4], oldest=None)[0] == []


def test_the_mark_forgets_dead_letters_that_left_and_those_below_the_floor() -> None:
    _, mark = look(WatchMark(), [3, 5, 8], oldest=4)
    assert (mark.floor, mark.reported) == (4, frozenset({5, 8}))
    _, mark = look(mark, [8], oldest=None)  # 5 was discarded, the queue emptied
    assert (mark.floor, mark.reported) == (9, frozenset())


def test_a_look_stopped_at_its_limit_goes_on_from_there_then_starts_over() -> None:
    mark = WatchMark()
    reported: list[int] = []
    present = [1, 2, 3, 4, 5]
    for _ in range(3):
        peeked = [n for n in present if n >= mark.next_start][:2]
        step = watch_step(
            mark,
            oldest_in_source=1,
            dead_letters=[letter(n) for n in peeked],
            complete=len(peeked) < 2,
        )
        reported += [d.sequence_number for d in step.new]
        mark = step.mark
    assert reported == [1, 2, 3, 4, 5]
    assert mark.resume == 0  # the last look reached the end: the next one starts at the floor


def test_a_mark_round_trips_through_its_document() -> None:
    mark = WatchMark(3, frozenset({4, 7}), resume=8)
    assert WatchMark.from_document(json.loads(json.dumps(mark.to_document()))) == mark
