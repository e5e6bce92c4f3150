"""When each order began compensating, as the state store shows it (C1, C2).

The state record keeps no compensation start time, only its current version. So while the
demo runs, a watch reads the records of the orders not yet seen in a final state, every
``interval`` seconds, and notes for each order the UpdatedAt of the first version it sees in
``Compensating``: the write that moved it there (a step failing for good, or the supervisor
giving up) or, when a poll missed that version, a later write of the compensation. Never
before the true start, so a check against it may miss a violation but never invents one.
An order that compensated between two polls is never seen Compensating; the services'
ledgers still bound its start (`demo.evidence`).

The watch runs on a thread of its own, with stores of its own that count into nobody's
cost, so the event loop that runs the app never waits on it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import datetime

import bootstrap
from config import Settings
from demo.report import FINAL_STATES
from domain.ports import StateStore, StoreError, StoreMetrics
from domain.records import ProcessState

log = logging.getLogger(__name__)

WATCH_INTERVAL_SECONDS = 0.2
STOP_BOUND_SECONDS = 30.0


class CompensationWatch:
    """``start()``, then ``stop()`` returns {order id: first UpdatedAt seen Compensating}."""

    def __init__(
        self,
        settings: Settings,
        order_ids: Iterable[str],
        *,
        interval: float = WATCH_INTERVAL_SECONDS,
    ) -> None:
        self._settings = settings
        self._watching = list(order_ids)
        self._interval = interval
        self._stop = threading.Event()
        self._began: dict[str, datetime] = {}
        self._thread = threading.Thread(target=self._run, name="compensation-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, datetime]:
        self._stop.set()
        self._thread.join(STOP_BOUND_SECONDS)
        if self._thread.is_alive():
            raise RuntimeError(f"the compensation watch did not stop in {STOP_BOUND_SECONDS}s")
        return dict(self._began)

    def _run(self) -> None:
        try:
            states, orders = bootstrap.open_stores(self._settings, StoreMetrics())
        except StoreError as error:
            log.warning("compensation watch: cannot open the state store, not watching: %s", error)
            return
        try:
            while self._watching and not self._stop.is_set():
                try:
                    self._poll(states)
                except StoreError as error:
                    # One missed poll costs precision, never correctness; try again next time.
                    log.warning("compensation watch: reading the state store failed: %s", error)
                self._stop.wait(self._interval)
        finally:
            states.close()
            orders.close()

    def _poll(self, states: StateStore) -> None:
        still: list[str] = []
        for order_id in self._watching:
            if self._stop.is_set():
                return
            record = states.get(order_id)
            if record is None:
                still.append(order_id)
                continue
            if record.process_state is ProcessState.COMPENSATING:
                self._began.setdefault(order_id, record.updated_at)
            if record.process_state.value not in FINAL_STATES:
                still.append(order_id)
        self._watching = still
