"""The simulated services, each declared as data: its operations, resource, paths and rules.

One implementation (`ledger`, `api`, `injector`) runs every service; a `ServiceDeclaration`
says what differs: the action and its compensation (C1), the id of the resource the action
creates, the paths it is served under, what an action request needs, and any special rule.

The catalogue (`SERVICES`, served together by `simulators.services.server`), as
``service (path prefix): action, POST path -> resource id field; compensation``:
- stock (``/stock``): ``reserve``, ``POST /stock/reservations`` -> ``reservationId``;
  ``release``
- payment (``/payment``): ``charge``, ``POST /payment/payments`` -> ``paymentId``; ``refund``
- shipping (``/shipping``): ``ship``, ``POST /shipping/shipments`` -> ``shipmentId``;
  ``cancel``

A compensation is ``POST {prefix}/{collection}/{id}/{compensation}``, e.g.
``/payment/payments/pay-000001/refund``, or, for an action whose outcome is in doubt, by its
idempotency key: ``POST {prefix}/{collection}/by-key/{compensation}``, e.g.
``/payment/payments/by-key/refund`` (C1, E7; `simulators.services.api`). Stock, payment and
shipping serve the steps ``reserve-stock``, ``charge-payment`` and ``ship-order``. Shipping has
the dispatch rule: a dispatched shipment cannot be cancelled (see `simulators.services.faults`,
kind ``dispatched``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from tools.simulators.services.faults import FaultKind, FaultPlan, InvalidFaultPlan
from tools.simulators.services.payloads import ITEMS, MONEY, PayloadShape


class Role(StrEnum):
    """What an operation or side effect is to the order: the step's work or its undoing."""

    ACTION = "action"
    COMPENSATION = "compensation"


class SideEffectKind(StrEnum):
    """The side effects the services perform, as the ledgers name them."""

    RESERVATION = "reservation"
    RELEASE = "release"
    PAYMENT = "payment"
    REFUND = "refund"
    SHIPMENT = "shipment"
    CANCELLATION = "cancellation"


@dataclass(frozen=True)
class ServiceDeclaration:
    """One simulated service.

    ``performed_status`` and ``compensated_status`` are the resource's ``status`` before and
    after its compensation, and the words of the service's messages ("cannot be charged").
    With ``dispatchable`` a resource can become dispatched (status ``dispatched``), after
    which its compensation is refused for good.
    """

    name: str
    path_prefix: str
    collection: str
    action: str
    compensation: str
    id_field: str
    id_prefix: str
    action_effect: SideEffectKind
    compensation_effect: SideEffectKind
    performed_status: str
    compensated_status: str
    payload: PayloadShape
    dispatchable: bool = False

    @property
    def action_path(self) -> str:
        return f"{self.path_prefix}/{self.collection}"

    def compensation_path(self, resource_id: str) -> str:
        return f"{self.action_path}/{resource_id}/{self.compensation}"

    @property
    def compensation_by_key_path(self) -> str:
        """The compensation of the action named by the request's ``Idempotency-Key``."""
        return f"{self.action_path}/by-key/{self.compensation}"

    @property
    def fault_kinds(self) -> tuple[FaultKind, ...]:
        return tuple(
            kind for kind in FaultKind if self.dispatchable or kind is not FaultKind.DISPATCHED
        )

    def role_of(self, kind: SideEffectKind) -> Role:
        return Role.ACTION if kind is self.action_effect else Role.COMPENSATION

    def check_plan(self, plan: FaultPlan) -> None:
        """Refuse a plan that names operations or faults this service does not have."""
        unknown_operations = sorted(plan.operations() - {self.action, self.compensation})
        if unknown_operations:
            raise InvalidFaultPlan(
                f"the {self.name} service has no operation {unknown_operations}; its "
                f"operations are {self.action!r} and {self.compensation!r}"
            )
        unknown_kinds = sorted(plan.kinds() - set(self.fault_kinds))
        if unknown_kinds:
            raise InvalidFaultPlan(
                f"the {self.name} service has no fault kind {unknown_kinds}; its kinds are "
                f"{[kind.value for kind in self.fault_kinds]}"
            )
        if plan.dispatch_after_seconds is not None and not self.dispatchable:
            raise InvalidFaultPlan(
                f"dispatchAfterSeconds applies to services with a dispatch rule; the "
                f"{self.name} service has none"
            )


STOCK = ServiceDeclaration(
    name="stock",
    path_prefix="/stock",
    collection="reservations",
    action="reserve",
    compensation="release",
    id_field="reservationId",
    id_prefix="res",
    action_effect=SideEffectKind.RESERVATION,
    compensation_effect=SideEffectKind.RELEASE,
    performed_status="reserved",
    compensated_status="released",
    payload=ITEMS,
)
PAYMENT = ServiceDeclaration(
    name="payment",
    path_prefix="/payment",
    collection="payments",
    action="charge",
    compensation="refund",
    id_field="paymentId",
    id_prefix="pay",
    action_effect=SideEffectKind.PAYMENT,
    compensation_effect=SideEffectKind.REFUND,
    performed_status="charged",
    compensated_status="refunded",
    payload=MONEY,
)
SHIPPING = ServiceDeclaration(
    name="shipping",
    path_prefix="/shipping",
    collection="shipments",
    action="ship",
    compensation="cancel",
    id_field="shipmentId",
    id_prefix="shp",
    action_effect=SideEffectKind.SHIPMENT,
    compensation_effect=SideEffectKind.CANCELLATION,
    performed_status="shipped",
    compensated_status="cancelled",
    payload=ITEMS,
    dispatchable=True,
)

SERVICES: Mapping[str, ServiceDeclaration] = {
    service.name: service for service in (STOCK, PAYMENT, SHIPPING)
}


def declaration(name: str) -> ServiceDeclaration:
    try:
        return SERVICES[name]
    except KeyError:
        raise ValueError(
            f"no simulated service {name!r}; the services are {list(SERVICES)}"
        ) from None


def preset_plans(preset: str) -> dict[str, FaultPlan]:
    """Every service's plan under fault preset ``preset``, by service name."""
    return {name: FaultPlan.preset(preset, name) for name in SERVICES}
