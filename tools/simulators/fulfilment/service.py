"""The fulfilment service as the version-1 workflow and its tests address it (E7, E8, E9, C1).

`FulfilmentService` runs every simulated service (`simulators.services.server`, ``.services``)
and reads and configures the fulfilment service, served at the root;
`FulfilmentServiceThread` does the same on a background thread.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from tools.simulators.services.declarations import FULFILMENT
from tools.simulators.services.faults import FaultPlan
from tools.simulators.services.ledger import SideEffect, Tombstone, utc_now
from tools.simulators.services.server import LOOPBACK, SimulatedServices, SimulatedServicesThread


class Operation(StrEnum):
    """The fulfilment service's operations, as fault rules name them."""

    FULFIL = FULFILMENT.action
    CANCEL = FULFILMENT.compensation


class FulfilmentService:
    """The simulated services with ``plan`` for fulfilment and ``plans`` for the others."""

    def __init__(
        self,
        plan: FaultPlan | None = None,
        *,
        plans: Mapping[str, FaultPlan] | None = None,
        seed: int = 0,
        host: str = LOOPBACK,
        port: int = 0,
        ledger_path: Path | None = None,
        now: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        self.services = SimulatedServices(
            {**(plans or {}), FULFILMENT.name: plan or FaultPlan.preset("none")},
            seed=seed,
            host=host,
            port=port,
            ledger_path=ledger_path,
            now=now,
        )

    async def start(self) -> None:
        await self.services.start()

    def release_held(self) -> None:
        """Answer every hung and delayed request now, and every later one a fault would hold."""
        self.services.release_held()

    async def stop(self) -> None:
        """Release hung and delayed requests, stop serving, close the ledger file. Idempotent."""
        await self.services.stop()

    @property
    def port(self) -> int:
        return self.services.port

    @property
    def base_url(self) -> str:
        """The fulfilment service's base URL, which is also the root of every service."""
        return self.services.url(FULFILMENT.name)

    def stats(self) -> dict[str, Any]:
        """The ``GET /stats`` document, read in-process."""
        return self.services.stats(FULFILMENT.name)

    def ledger_entries(self, order_id: str | None = None) -> list[SideEffect]:
        return self.services.ledger_entries(FULFILMENT.name, order_id)

    def tombstones(self, order_id: str | None = None) -> list[Tombstone]:
        """The idempotency keys cancelled by key with nothing to cancel."""
        return self.services.tombstones(FULFILMENT.name, order_id)

    def replace_fault_plan(self, plan: FaultPlan) -> None:
        """Like ``PUT /faults``; the next request already uses ``plan``."""
        self.services.replace_fault_plan(FULFILMENT.name, plan)


class FulfilmentServiceThread:
    """A `FulfilmentService` on a background thread with its own event loop.

    ``with FulfilmentServiceThread(FaultPlan.preset("default"), seed=7) as service:`` starts it
    (raising what start raised, or TimeoutError after ``start_timeout`` seconds) and stops it on
    exit. The inspection methods are safe to call from any thread.
    """

    def __init__(
        self,
        plan: FaultPlan | None = None,
        *,
        plans: Mapping[str, FaultPlan] | None = None,
        seed: int = 0,
        host: str = LOOPBACK,
        port: int = 0,
        ledger_path: Path | None = None,
        start_timeout: float = 10.0,
    ) -> None:
        self.service = FulfilmentService(
            plan, plans=plans, seed=seed, host=host, port=port, ledger_path=ledger_path
        )
        self._thread = SimulatedServicesThread(self.service.services, start_timeout=start_timeout)

    def __enter__(self) -> Self:
        self._thread.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._thread.__exit__(exc_type, exc, traceback)

    @property
    def port(self) -> int:
        return self.service.port

    @property
    def base_url(self) -> str:
        return self.service.base_url

    def stats(self) -> dict[str, Any]:
        return self.service.stats()

    def ledger_entries(self, order_id: str | None = None) -> list[SideEffect]:
        return self.service.ledger_entries(order_id)

    def tombstones(self, order_id: str | None = None) -> list[Tombstone]:
        return self.service.tombstones(order_id)

    def replace_fault_plan(self, plan: FaultPlan) -> None:
        self.service.replace_fault_plan(plan)
