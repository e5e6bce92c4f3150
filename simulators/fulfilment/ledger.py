"""The simulator's side-effect ledger: idempotency keys and fencing enforced at the target.

What it guarantees, and what the tests and the demo assert on:
- Idempotency (E7, C8): a fulfilment is performed once per ``Idempotency-Key``. A repeat with the
  same key and the same request (orderId and items) replays the recorded fulfilment and performs
  nothing; the same key with a different request is refused as key reuse. The attempt is not
  part of the request's identity: it is the fencing token, so a newer attempt that repeats an
  older attempt's key replays that fulfilment and the order is fulfilled once across attempts.
- Fencing (E7): the ledger remembers the highest attempt that touched each order. A call with a
  lower attempt is refused and counted (``stale_writes_refused``); a higher attempt raises the
  fence; the same attempt's retries pass.
- Compensation (C1): a fulfilment is cancelled at most once, whoever asks and however often.
- Evidence: every side effect is listed (`entries`), and `stats` counts ``double_side_effects``,
  the orders fulfilled more than once, which stays 0 while clients use idempotency keys well.

Every operation runs under one lock with no await inside, so concurrent requests on the same
key (from the event loop or other threads) perform exactly one side effect.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from simulators.fulfilment.journal import CorruptJournal, LedgerJournal


class SideEffectKind(StrEnum):
    FULFILMENT = "fulfilment"
    COMPENSATION = "compensation"


class Outcome(StrEnum):
    PERFORMED = "performed"
    REPLAYED = "replayed"
    STALE_ATTEMPT = "stale-attempt"
    KEY_REUSE = "idempotency-key-reuse"


@dataclass(frozen=True)
class Item:
    sku: str
    quantity: int


@dataclass(frozen=True)
class Fulfilment:
    fulfilment_id: str
    order_id: str
    attempt: int
    idempotency_key: str
    items: tuple[Item, ...]


@dataclass(frozen=True)
class SideEffect:
    sequence: int
    kind: SideEffectKind
    order_id: str
    attempt: int
    idempotency_key: str | None
    fulfilment_id: str
    at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "kind": self.kind.value,
            "orderId": self.order_id,
            "attempt": self.attempt,
            "idempotencyKey": self.idempotency_key,
            "fulfilmentId": self.fulfilment_id,
            "at": self.at,
        }


@dataclass(frozen=True)
class LedgerResult:
    """What a fulfil or cancel call did; ``fence`` is the order's highest attempt afterwards."""

    outcome: Outcome
    fulfilment: Fulfilment | None
    fence: int
    cancelled: bool = False


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Ledger:
    def __init__(
        self, journal: LedgerJournal | None = None, now: Callable[[], dt.datetime] = _utc_now
    ) -> None:
        self._journal = journal
        self._now = now
        self._lock = threading.Lock()
        self._side_effects: list[SideEffect] = []
        self._fulfilments: dict[str, Fulfilment] = {}
        self._by_key: dict[str, Fulfilment] = {}
        self._cancelled: set[str] = set()
        self._fences: dict[str, int] = {}
        self._effects_per_order: dict[str, Counter[SideEffectKind]] = {}
        self._refusals: Counter[Outcome] = Counter()
        self._replays = 0
        if journal is not None:
            for number, event in enumerate(journal.events(), start=1):
                try:
                    self._apply(event)
                except (KeyError, TypeError, ValueError) as error:
                    raise CorruptJournal(
                        f"{journal.path}:{number} is not a ledger fact ({error!r}); move the "
                        "file away to start with an empty ledger"
                    ) from None

    def fulfil(
        self, order_id: str, attempt: int, items: Sequence[Item], idempotency_key: str
    ) -> LedgerResult:
        with self._lock:
            fence = self._fences.get(order_id, 0)
            if attempt < fence:
                self._refusals[Outcome.STALE_ATTEMPT] += 1
                return LedgerResult(Outcome.STALE_ATTEMPT, None, fence)
            existing = self._by_key.get(idempotency_key)
            if existing is not None:
                if (existing.order_id, existing.items) != (order_id, tuple(items)):
                    self._refusals[Outcome.KEY_REUSE] += 1
                    return LedgerResult(Outcome.KEY_REUSE, existing, fence)
                return self._replay(existing, attempt)
            fulfilment = Fulfilment(
                f"ful-{len(self._fulfilments) + 1:06d}",
                order_id,
                attempt,
                idempotency_key,
                tuple(items),
            )
            self._record(
                {
                    "event": SideEffectKind.FULFILMENT.value,
                    "fulfilmentId": fulfilment.fulfilment_id,
                    "orderId": order_id,
                    "attempt": attempt,
                    "idempotencyKey": idempotency_key,
                    "items": [{"sku": i.sku, "quantity": i.quantity} for i in fulfilment.items],
                    "at": self._timestamp(),
                }
            )
            return LedgerResult(Outcome.PERFORMED, fulfilment, self._fences[order_id])

    def cancel(self, fulfilment_id: str, attempt: int) -> LedgerResult | None:
        """Compensate ``fulfilment_id`` once; None when no such fulfilment exists."""
        with self._lock:
            fulfilment = self._fulfilments.get(fulfilment_id)
            if fulfilment is None:
                return None
            fence = self._fences.get(fulfilment.order_id, 0)
            if attempt < fence:
                self._refusals[Outcome.STALE_ATTEMPT] += 1
                return LedgerResult(Outcome.STALE_ATTEMPT, fulfilment, fence)
            if fulfilment_id in self._cancelled:
                return self._replay(fulfilment, attempt)
            self._record(
                {
                    "event": SideEffectKind.COMPENSATION.value,
                    "fulfilmentId": fulfilment_id,
                    "orderId": fulfilment.order_id,
                    "attempt": attempt,
                    "at": self._timestamp(),
                }
            )
            return LedgerResult(
                Outcome.PERFORMED, fulfilment, self._fences[fulfilment.order_id], cancelled=True
            )

    def find(self, fulfilment_id: str) -> Fulfilment | None:
        with self._lock:
            return self._fulfilments.get(fulfilment_id)

    def entries(self, order_id: str | None = None) -> list[SideEffect]:
        """Every side effect in the order performed, optionally those of one order only."""
        with self._lock:
            return [e for e in self._side_effects if order_id in (None, e.order_id)]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            per_order = {
                order_id: {kind.value: counts[kind] for kind in SideEffectKind}
                for order_id, counts in self._effects_per_order.items()
            }
            return {
                "fulfilments": len(self._fulfilments),
                "compensations": len(self._cancelled),
                "side_effects_per_order": per_order,
                "double_side_effects": sum(
                    1
                    for counts in self._effects_per_order.values()
                    if counts[SideEffectKind.FULFILMENT] > 1
                ),
                "stale_writes_refused": self._refusals[Outcome.STALE_ATTEMPT],
                "idempotency_key_reuse_refused": self._refusals[Outcome.KEY_REUSE],
                "replays": self._replays,
            }

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()

    def _replay(self, fulfilment: Fulfilment, attempt: int) -> LedgerResult:
        if attempt > self._fences.get(fulfilment.order_id, 0):
            self._record({"event": "fence", "orderId": fulfilment.order_id, "attempt": attempt})
        self._replays += 1
        return LedgerResult(
            Outcome.REPLAYED,
            fulfilment,
            self._fences[fulfilment.order_id],
            cancelled=fulfilment.fulfilment_id in self._cancelled,
        )

    def _record(self, event: dict[str, Any]) -> None:
        # Written before it is applied and answered, so a crash can lose the answer, never
        # the fact: the client's retry then replays it.
        if self._journal is not None:
            self._journal.append(event)
        self._apply(event)

    def _apply(self, event: dict[str, Any]) -> None:
        order_id: str = event["orderId"]
        attempt: int = event["attempt"]
        self._fences[order_id] = max(attempt, self._fences.get(order_id, 0))
        if event["event"] == "fence":
            return
        kind = SideEffectKind(event["event"])
        key: str | None = None
        if kind is SideEffectKind.FULFILMENT:
            items = tuple(Item(i["sku"], i["quantity"]) for i in event["items"])
            fulfilment = Fulfilment(
                event["fulfilmentId"], order_id, attempt, event["idempotencyKey"], items
            )
            self._fulfilments[fulfilment.fulfilment_id] = fulfilment
            self._by_key[fulfilment.idempotency_key] = fulfilment
            key = fulfilment.idempotency_key
        else:
            self._cancelled.add(event["fulfilmentId"])
        self._effects_per_order.setdefault(order_id, Counter())[kind] += 1
        self._side_effects.append(
            SideEffect(
                len(self._side_effects) + 1,
                kind,
                order_id,
                attempt,
                key,
                event["fulfilmentId"],
                event["at"],
            )
        )

    def _timestamp(self) -> str:
        return self._now().isoformat(timespec="milliseconds").replace("+00:00", "Z")
