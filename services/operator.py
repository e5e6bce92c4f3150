"""What an orchestration and an operator read or ask of the stores (D6, E8).

`load_order` is the orchestration's one read of the orders database (D6). `resubmit_order`
is the operator's way back after investigating an order in Error (E8): a conditional
replace, so it cannot race the supervisor or another operator.
"""

from __future__ import annotations

from datetime import datetime

from domain.contracts import Order
from domain.ports import OrderStore, RecordNotFound, StateStore
from domain.records import InstanceId, StateRecord
from domain.transitions import resubmit


def load_order(orders: OrderStore, instance: InstanceId) -> Order:
    """The order an attempt works on; its absence means submission never completed."""
    order = orders.get(instance.order_id)
    if order is None:
        raise RecordNotFound(
            f"order {instance.order_id!r} of attempt {instance} is not in the orders database; "
            f"its state record exists only if a submission wrote it, so check the orders store"
        )
    return order


def resubmit_order(states: StateStore, order_id: str, now: datetime) -> StateRecord:
    """Put an order in Error back to Pending for the starter (E8).

    Raises `RecordNotFound` for an unknown order, `IllegalTransition` when it is not in
    Error, and `PreconditionFailed` when it changed while being resubmitted.
    """
    record = states.get(order_id)
    if record is None:
        raise RecordNotFound(f"no state record for order {order_id!r}")
    return states.replace(resubmit(record, now=now))
