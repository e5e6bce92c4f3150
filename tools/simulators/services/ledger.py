"""A simulated service's side-effect ledger: idempotency keys and fencing enforced at the target.

One implementation for every service (`simulators.services.declarations`); what the tests and
the demo assert on:
- Idempotency (E7, C8): an action is performed once per ``Idempotency-Key``. A repeat with the
  same key and the same request (orderId and payload) replays the recorded resource and
  performs nothing; the same key with a different request is refused as key reuse. The attempt
  is not part of the request's identity: it is the fencing token, so a newer attempt that
  repeats an older attempt's key replays that resource and the step happens once across
  attempts.
- Fencing (E7): the ledger remembers the highest attempt that touched each order. A call with a
  lower attempt is refused and counted (``stale_writes_refused``); a higher attempt raises the
  fence; the same attempt's retries pass. Actions and compensations are fenced alike.
- Declines (E8, E7): an action the service declines (a business failure, 422) is recorded
  with its key and attempt, so the same request gets the same answer: a later action with
  the key from that attempt replays the decline (counted, ``declines_replayed``) and performs
  nothing, also after a restart. An order ended in Error by a declined first step has
  nothing performed there, however often its request is delivered again. The decline raises
  the fence, so an older attempt is refused as stale; only a newer attempt, which an
  operator's resubmit or the supervisor's retry starts, gets a fresh answer.
- Compensation (C1): a resource is compensated at most once, whoever asks and however often;
  the repeats replay. With the dispatch rule (C2), a dispatched resource is never compensated.
- Compensation by idempotency key (C1, E7), for a step whose outcome is in doubt: when an
  action with the key was performed, it is compensated exactly as by its resource id; when none
  was, nothing is performed and the key is remembered as undone (a tombstone), so any later
  action with that key, whatever its attempt, is refused as ``compensated`` and counted
  (``actions_refused_after_undo``): a request still in flight from an expired attempt cannot
  perform a side effect once the order began compensating. Repeats replay. It is fenced like
  every call, under the order the request names, whose fence it raises.
- Evidence: every side effect is listed in the order performed (`entries`) with the time it
  was performed (after any latency fault's delay), so the net effect per order (actions minus
  compensations) and the side effects performed after an order began compensating can be
  checked; `tombstones` lists the keys undone before any action with them was performed, each
  with its time (its order had begun compensating by then). `stats` counts side effects per order
  and counts ``double_side_effects``, the orders whose action was performed more than once,
  which stays 0 while clients use idempotency keys well.

Every operation runs under one lock with no await inside, so concurrent requests on the same
key (from the event loop or other threads) perform exactly one side effect.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tools.simulators.services.declarations import Role, ServiceDeclaration, SideEffectKind
from tools.simulators.services.journal import CorruptJournal, LedgerJournal

DISPATCHED_STATUS = "dispatched"


class Outcome(StrEnum):
    PERFORMED = "performed"
    REPLAYED = "replayed"
    STALE_ATTEMPT = "stale-attempt"
    KEY_REUSE = "idempotency-key-reuse"
    ALREADY_DISPATCHED = "already-dispatched"
    NOTHING_TO_UNDO = "nothing-to-undo"
    COMPENSATED = "compensated"
    DECLINED = "declined"


@dataclass(frozen=True)
class Resource:
    """What an action created: a reservation, a payment, a shipment."""

    resource_id: str
    order_id: str
    attempt: int
    idempotency_key: str
    payload: Mapping[str, Any]
    at: str


@dataclass(frozen=True)
class Tombstone:
    """An idempotency key undone before any action with it was performed: no action with it
    will ever be performed. ``attempt`` and ``at`` are the undo's."""

    idempotency_key: str
    order_id: str
    attempt: int
    at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "idempotencyKey": self.idempotency_key,
            "orderId": self.order_id,
            "attempt": self.attempt,
            "at": self.at,
        }


@dataclass(frozen=True)
class Decline:
    """An action the service declined: every later action with its key from ``attempt`` is
    declined too. ``attempt`` and ``at`` are the latest decline's."""

    idempotency_key: str
    order_id: str
    attempt: int
    payload: Mapping[str, Any]
    at: str


@dataclass(frozen=True)
class SideEffect:
    sequence: int
    kind: SideEffectKind
    role: Role
    order_id: str
    attempt: int
    idempotency_key: str | None
    resource_id: str
    at: str

    def to_json(self, id_field: str) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "kind": self.kind.value,
            "orderId": self.order_id,
            "attempt": self.attempt,
            "idempotencyKey": self.idempotency_key,
            id_field: self.resource_id,
            "at": self.at,
        }


@dataclass(frozen=True)
class LedgerResult:
    """What an action or compensation call did.

    ``fence`` is the order's highest attempt afterwards; ``status`` the resource's status
    (empty when the call came without a resource); ``dispatched_at`` when it was dispatched;
    ``tombstone`` the key's tombstone when the call met one (outcome ``nothing-to-undo``,
    ``compensated``, a replay of an undo that found nothing, or key reuse of an undone key);
    ``decline`` the key's decline when it was declined (outcome ``declined``, or key reuse of
    a declined key).
    """

    outcome: Outcome
    resource: Resource | None
    fence: int
    status: str = ""
    dispatched_at: str | None = None
    tombstone: Tombstone | None = None
    decline: Decline | None = None


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Ledger:
    def __init__(
        self,
        service: ServiceDeclaration,
        journal: LedgerJournal | None = None,
        now: Callable[[], dt.datetime] = utc_now,
    ) -> None:
        self.service = service
        self._journal = journal
        self._now = now
        self._lock = threading.Lock()
        self._side_effects: list[SideEffect] = []
        self._resources: dict[str, Resource] = {}
        self._by_key: dict[str, Resource] = {}
        self._compensated: set[str] = set()
        self._dispatched: dict[str, str] = {}
        self._tombstones: dict[str, Tombstone] = {}
        self._declines: dict[str, Decline] = {}
        self._declines_replayed = 0
        self._fences: dict[str, int] = {}
        self._effects_per_order: dict[str, Counter[SideEffectKind]] = {}
        self._refusals: Counter[Outcome] = Counter()
        self._replays = 0

    def perform(
        self,
        order_id: str,
        attempt: int,
        payload: Mapping[str, Any],
        idempotency_key: str,
        *,
        dispatch: bool = False,
        decline: bool = False,
    ) -> LedgerResult:
        """The action, once per key; ``dispatch`` dispatches the resource it performs,
        ``decline`` declines it (``declined``) unless an action with the key was performed.

        Refused (``compensated``) when the key was undone before any action with it, whatever
        the attempt: that refusal is final, so it is the one given and counted. A key declined
        for this attempt is declined again (``declined``) and nothing is performed.
        """
        with self._lock:
            fence = self._fences.get(order_id, 0)
            tombstone = self._tombstones.get(idempotency_key)
            if tombstone is not None:
                self._refusals[Outcome.COMPENSATED] += 1
                return LedgerResult(Outcome.COMPENSATED, None, fence, tombstone=tombstone)
            if attempt < fence:
                self._refusals[Outcome.STALE_ATTEMPT] += 1
                return LedgerResult(Outcome.STALE_ATTEMPT, None, fence)
            declined = self._declined_for(idempotency_key, attempt)
            if declined is not None:
                if (declined.order_id, declined.payload) != (order_id, payload):
                    self._refusals[Outcome.KEY_REUSE] += 1
                    return LedgerResult(Outcome.KEY_REUSE, None, fence, decline=declined)
                # Recording the decline raised the fence to its attempt, this one's.
                self._declines_replayed += 1
                return LedgerResult(Outcome.DECLINED, None, fence, decline=declined)
            existing = self._by_key.get(idempotency_key)
            if existing is not None:
                if (existing.order_id, existing.payload) != (order_id, payload):
                    self._refusals[Outcome.KEY_REUSE] += 1
                    return LedgerResult(Outcome.KEY_REUSE, existing, fence)
                return self._replay(existing, attempt)
            if decline:
                self._record(
                    {
                        "event": "decline",
                        "orderId": order_id,
                        "attempt": attempt,
                        "idempotencyKey": idempotency_key,
                        **payload,
                        "at": self._timestamp(),
                    }
                )
                return LedgerResult(
                    Outcome.DECLINED,
                    None,
                    self._fences[order_id],
                    decline=self._declines[idempotency_key],
                )
            resource_id = f"{self.service.id_prefix}-{len(self._resources) + 1:06d}"
            at = self._timestamp()
            self._record(
                {
                    "event": self.service.action_effect.value,
                    self.service.id_field: resource_id,
                    "orderId": order_id,
                    "attempt": attempt,
                    "idempotencyKey": idempotency_key,
                    **payload,
                    "at": at,
                }
            )
            if dispatch and self.service.dispatchable:
                self._record_dispatch(self._resources[resource_id], attempt, at)
            return self._result(Outcome.PERFORMED, self._resources[resource_id])

    def compensate(
        self,
        resource_id: str,
        attempt: int,
        *,
        dispatch: bool = False,
        dispatch_after_seconds: float | None = None,
    ) -> LedgerResult | None:
        """Compensate ``resource_id`` once; None when no such resource exists.

        With the dispatch rule, ``dispatch`` (a fault) or a resource older than
        ``dispatch_after_seconds`` is dispatched first, and the compensation refused.
        """
        with self._lock:
            resource = self._resources.get(resource_id)
            if resource is None:
                return None
            fence = self._fences.get(resource.order_id, 0)
            if attempt < fence:
                self._refusals[Outcome.STALE_ATTEMPT] += 1
                return LedgerResult(Outcome.STALE_ATTEMPT, resource, fence)
            return self._compensate(resource, attempt, dispatch, dispatch_after_seconds)

    def compensate_by_key(
        self,
        order_id: str,
        attempt: int,
        idempotency_key: str,
        *,
        dispatch: bool = False,
        dispatch_after_seconds: float | None = None,
    ) -> LedgerResult:
        """Undo the action performed with ``idempotency_key`` for ``order_id``, if any.

        A performed action is compensated as by `compensate`. Otherwise nothing is performed:
        the key gets a tombstone (``nothing-to-undo``; a repeat replays it) and every later
        action with it is refused. A key of another order's action or tombstone is refused as
        key reuse. Fenced under ``order_id``, whose fence it raises.
        """
        with self._lock:
            fence = self._fences.get(order_id, 0)
            if attempt < fence:
                self._refusals[Outcome.STALE_ATTEMPT] += 1
                return LedgerResult(Outcome.STALE_ATTEMPT, None, fence)
            resource = self._by_key.get(idempotency_key)
            if resource is not None:
                if resource.order_id != order_id:
                    self._refusals[Outcome.KEY_REUSE] += 1
                    return LedgerResult(Outcome.KEY_REUSE, resource, fence)
                return self._compensate(resource, attempt, dispatch, dispatch_after_seconds)
            tombstone = self._tombstones.get(idempotency_key)
            if tombstone is not None:
                if tombstone.order_id != order_id:
                    self._refusals[Outcome.KEY_REUSE] += 1
                    return LedgerResult(Outcome.KEY_REUSE, None, fence, tombstone=tombstone)
                self._raise_fence(order_id, attempt)
                self._replays += 1
                return LedgerResult(
                    Outcome.REPLAYED, None, self._fences[order_id], tombstone=tombstone
                )
            self._record(
                {
                    "event": "tombstone",
                    "idempotencyKey": idempotency_key,
                    "orderId": order_id,
                    "attempt": attempt,
                    "at": self._timestamp(),
                }
            )
            return LedgerResult(
                Outcome.NOTHING_TO_UNDO,
                None,
                self._fences[order_id],
                tombstone=self._tombstones[idempotency_key],
            )

    def answered(self, idempotency_key: str, attempt: int) -> bool:
        """Whether an action with the key was performed, or declined for ``attempt``: a
        request with it is answered from the ledger (a replay of either, or a refusal of
        another order's key), never declined anew."""
        with self._lock:
            return (
                idempotency_key in self._by_key
                or self._declined_for(idempotency_key, attempt) is not None
            )

    def _declined_for(self, idempotency_key: str, attempt: int) -> Decline | None:
        """The decline of the key that answers ``attempt``: one recorded for it or a later
        attempt (lock held)."""
        declined = self._declines.get(idempotency_key)
        return declined if declined is not None and declined.attempt >= attempt else None

    def find(self, resource_id: str) -> Resource | None:
        with self._lock:
            return self._resources.get(resource_id)

    def tombstones(self, order_id: str | None = None) -> list[Tombstone]:
        """Every key undone with nothing to undo, in the order undone, optionally of one order."""
        with self._lock:
            return [t for t in self._tombstones.values() if order_id in (None, t.order_id)]

    def entries(self, order_id: str | None = None) -> list[SideEffect]:
        """Every side effect in the order performed, optionally those of one order only."""
        with self._lock:
            return [e for e in self._side_effects if order_id in (None, e.order_id)]

    def stats(self) -> dict[str, Any]:
        action = self.service.action_effect
        compensation = self.service.compensation_effect
        with self._lock:
            per_order = {
                order_id: {action.value: counts[action], compensation.value: counts[compensation]}
                for order_id, counts in self._effects_per_order.items()
            }
            stats: dict[str, Any] = {
                f"{action.value}s": len(self._resources),
                f"{compensation.value}s": len(self._compensated),
                "side_effects_per_order": per_order,
                "double_side_effects": sum(
                    1 for counts in self._effects_per_order.values() if counts[action] > 1
                ),
                "stale_writes_refused": self._refusals[Outcome.STALE_ATTEMPT],
                "idempotency_key_reuse_refused": self._refusals[Outcome.KEY_REUSE],
                "replays": self._replays,
                "tombstones": len(self._tombstones),
                "actions_refused_after_undo": self._refusals[Outcome.COMPENSATED],
                "declines": len(self._declines),
                "declines_replayed": self._declines_replayed,
            }
            if self.service.dispatchable:
                stats[DISPATCHED_STATUS] = len(self._dispatched)
                stats[f"{compensation.value}s_refused"] = self._refusals[Outcome.ALREADY_DISPATCHED]
            return stats

    def restore(self, event: dict[str, Any]) -> None:
        """Apply a fact read back from the journal (raises KeyError, TypeError, ValueError)."""
        with self._lock:
            self._apply(event)

    def _compensate(
        self,
        resource: Resource,
        attempt: int,
        dispatch: bool,
        dispatch_after_seconds: float | None,
    ) -> LedgerResult:
        """Compensate ``resource`` once, for a call that passed the fence (lock held)."""
        resource_id = resource.resource_id
        if resource_id in self._compensated:
            return self._replay(resource, attempt)
        if self.service.dispatchable:
            if resource_id not in self._dispatched:
                dispatched_at = self._dispatch_time(resource, dispatch, dispatch_after_seconds)
                if dispatched_at is not None:
                    self._record_dispatch(resource, attempt, dispatched_at)
            if resource_id in self._dispatched:
                self._raise_fence(resource.order_id, attempt)
                self._refusals[Outcome.ALREADY_DISPATCHED] += 1
                return self._result(Outcome.ALREADY_DISPATCHED, resource)
        self._record(
            {
                "event": self.service.compensation_effect.value,
                self.service.id_field: resource_id,
                "orderId": resource.order_id,
                "attempt": attempt,
                "at": self._timestamp(),
            }
        )
        return self._result(Outcome.PERFORMED, resource)

    def _replay(self, resource: Resource, attempt: int) -> LedgerResult:
        self._raise_fence(resource.order_id, attempt)
        self._replays += 1
        return self._result(Outcome.REPLAYED, resource)

    def _result(self, outcome: Outcome, resource: Resource) -> LedgerResult:
        dispatched_at = self._dispatched.get(resource.resource_id)
        if resource.resource_id in self._compensated:
            status = self.service.compensated_status
        elif dispatched_at is not None:
            status = DISPATCHED_STATUS
        else:
            status = self.service.performed_status
        return LedgerResult(
            outcome, resource, self._fences[resource.order_id], status, dispatched_at
        )

    def _dispatch_time(
        self, resource: Resource, dispatch: bool, dispatch_after_seconds: float | None
    ) -> str | None:
        if dispatch:
            return self._timestamp()
        if dispatch_after_seconds is None:
            return None
        due = _parse_timestamp(resource.at) + dt.timedelta(seconds=dispatch_after_seconds)
        return _format_timestamp(due) if due <= self._now() else None

    def _raise_fence(self, order_id: str, attempt: int) -> None:
        if attempt > self._fences.get(order_id, 0):
            self._record({"event": "fence", "orderId": order_id, "attempt": attempt})

    def _record_dispatch(self, resource: Resource, attempt: int, at: str) -> None:
        self._record(
            {
                "event": "dispatch",
                self.service.id_field: resource.resource_id,
                "orderId": resource.order_id,
                "attempt": attempt,
                "at": at,
            }
        )

    def _record(self, event: dict[str, Any]) -> None:
        # Written before it is applied and answered, so a crash can lose the answer, never
        # the fact: the client's retry then replays it.
        if self._journal is not None:
            self._journal.append({"service": self.service.name, **event})
        self._apply(event)

    def _apply(self, event: Mapping[str, Any]) -> None:
        order_id: str = event["orderId"]
        attempt: int = event["attempt"]
        self._fences[order_id] = max(attempt, self._fences.get(order_id, 0))
        name = event["event"]
        if name == "fence":
            return
        if name == "tombstone":
            undone_key: str = event["idempotencyKey"]
            self._tombstones[undone_key] = Tombstone(undone_key, order_id, attempt, event["at"])
            return
        if name == "decline":
            declined_key: str = event["idempotencyKey"]
            declined_payload = {field: event[field] for field in self.service.payload.fields}
            self._declines[declined_key] = Decline(
                declined_key, order_id, attempt, declined_payload, event["at"]
            )
            return
        resource_id: str = event[self.service.id_field]
        if name == "dispatch":
            self._dispatched[resource_id] = event["at"]
            return
        kind = SideEffectKind(name)
        key: str | None = None
        if kind is self.service.action_effect:
            payload = {field: event[field] for field in self.service.payload.fields}
            resource = Resource(
                resource_id, order_id, attempt, event["idempotencyKey"], payload, event["at"]
            )
            self._resources[resource_id] = resource
            self._by_key[resource.idempotency_key] = resource
            key = resource.idempotency_key
        elif kind is self.service.compensation_effect:
            self._compensated.add(resource_id)
        else:
            raise ValueError(f"the {self.service.name} service performs no {kind} side effect")
        self._effects_per_order.setdefault(order_id, Counter())[kind] += 1
        self._side_effects.append(
            SideEffect(
                len(self._side_effects) + 1,
                kind,
                self.service.role_of(kind),
                order_id,
                attempt,
                key,
                resource_id,
                event["at"],
            )
        )

    def _timestamp(self) -> str:
        return _format_timestamp(self._now())


def restore_ledgers(journal: LedgerJournal, ledgers: Mapping[str, Ledger]) -> None:
    """Give each service's ledger back the facts ``journal`` holds for it."""
    for number, event in journal.events():
        service = event.get("service")
        ledger = ledgers.get(service) if isinstance(service, str) else None
        if ledger is None:
            raise CorruptJournal(
                f"{journal.path}:{number} is a fact of an unknown service {service!r}; the "
                f"services are {sorted(ledgers)}"
            )
        try:
            ledger.restore(event)
        except (KeyError, TypeError, ValueError) as error:
            raise CorruptJournal(
                f"{journal.path}:{number} is not a ledger fact ({error!r}); move the file "
                "away to start with an empty ledger"
            ) from None


def _format_timestamp(moment: dt.datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_timestamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)
