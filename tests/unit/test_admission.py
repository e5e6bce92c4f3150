"""The backlog gate of submissions (C5): how often it counts the store, and what it admits.

A fake clock and a fake count stand in for time and the state store, so each test says
exactly what the store holds and when it is asked.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from services.admission import BacklogGate, Full, Reservation

THREAD_TIMEOUT = 30.0


class Store:
    """A backlog of `held` records, counted up to the bound as the store ports do."""

    def __init__(self, held: int) -> None:
        self.held = held
        self.counts = 0
        self.failing = False

    def count(self, at_most: int) -> int:
        self.counts += 1
        if self.failing:
            raise ConnectionError("store unreachable")
        return min(self.held, at_most)


class Clock:
    def __init__(self) -> None:
        self.seconds = 100.0

    def __call__(self) -> float:
        return self.seconds


def gate_over(
    store: Store, clock: Clock, *, bound: int, recount_seconds: float = 1.0
) -> BacklogGate:
    return BacklogGate(store.count, bound=bound, recount_seconds=recount_seconds, clock=clock)


def test_within_an_interval_the_gate_counts_once_and_adds_what_it_admitted_itself_c5() -> None:
    store, clock = Store(held=2), Clock()
    gate = gate_over(store, clock, bound=5)

    places = [gate.reserve() for _ in range(4)]

    assert [type(place) for place in places] == [Reservation] * 3 + [Full]
    assert [place.backlog for place in places] == [2, 3, 4, 5]
    assert store.counts == 1


def test_after_the_interval_the_gate_counts_again_and_sees_orders_that_finished_c5() -> None:
    store, clock = Store(held=3), Clock()
    gate = gate_over(store, clock, bound=3)
    assert gate.reserve() == Full(backlog=3, bound=3)
    store.held = 1  # two orders finished

    clock.seconds += 0.5
    assert isinstance(gate.reserve(), Full)  # the count of half a second ago still serves
    clock.seconds += 0.5
    assert gate.reserve() == Reservation(backlog=1)
    assert store.counts == 2


def test_a_submission_that_stored_nothing_gives_its_place_back_c5() -> None:
    store, clock = Store(held=0), Clock()
    gate = gate_over(store, clock, bound=2)
    resend = gate.reserve()
    new = gate.reserve()
    assert isinstance(resend, Reservation)
    assert isinstance(new, Reservation)
    assert isinstance(gate.reserve(), Full)

    gate.settle(resend, stored=False)  # a resend of an accepted order: no new record
    gate.settle(new, stored=True)

    assert gate.reserve() == Reservation(backlog=1)
    assert store.counts == 1


def test_a_failed_count_admits_nothing_and_the_next_submission_counts_again_c5() -> None:
    store, clock = Store(held=0), Clock()
    gate = gate_over(store, clock, bound=2)
    store.failing = True
    with pytest.raises(ConnectionError):
        gate.reserve()
    store.failing = False
    assert gate.reserve() == Reservation(backlog=0)
    assert store.counts == 2


def test_concurrent_submissions_never_admit_more_than_the_bound_c5() -> None:
    store, clock = Store(held=10), Clock()
    gate = gate_over(store, clock, bound=50, recount_seconds=60)
    barrier = threading.Barrier(8, timeout=THREAD_TIMEOUT)

    def submit_many(_: int) -> int:
        barrier.wait()
        return sum(isinstance(gate.reserve(), Reservation) for _ in range(20))

    with ThreadPoolExecutor(8) as pool:
        admitted = sum(pool.map(submit_many, range(8), timeout=THREAD_TIMEOUT))

    assert admitted == 40
    assert store.counts == 1


def test_a_gate_without_room_for_one_order_is_refused() -> None:
    with pytest.raises(ValueError, match="bound must be >= 1"):
        BacklogGate(Store(0).count, bound=0, recount_seconds=1)
