"""Compensation by idempotency key at every simulated service (C1, C2, E7, C8): an action whose
outcome is in doubt is undone by its key like by its id, or, never performed, its key is undone
for good so that a late request with it performs nothing; fenced, faulted and refused like
every compensation, and kept in the evidence and across restarts."""

import asyncio
import datetime as dt
from pathlib import Path

import aiohttp
import pytest
from devhost.testing import eventually

from tests.integration.simulators.service_calls import (
    TIMEOUT,
    get_json,
    post_action,
    post_compensation,
    post_compensation_by_key,
)
from tools.simulators.services import (
    PAYMENT,
    SERVICES,
    SHIPPING,
    STOCK,
    FaultKind,
    FaultPlan,
    FaultRule,
    Role,
    ServiceDeclaration,
    SimulatedServices,
)

every_service = pytest.mark.parametrize("step", list(SERVICES.values()), ids=lambda s: s.name)


def key_of(order: str, step: ServiceDeclaration) -> str:
    """The key `post_action` and `post_compensation_by_key` send by default."""
    return f"{order}:{step.action}"


def counts(services: SimulatedServices, step: ServiceDeclaration) -> tuple[int, int, int]:
    """Actions performed, compensations performed, keys undone with nothing to undo."""
    stats = services.stats(step.name)
    return (
        stats[f"{step.action_effect}s"],
        stats[f"{step.compensation_effect}s"],
        stats["tombstones"],
    )


@every_service
async def test_a_performed_action_is_undone_by_its_key_once_and_replayed_after(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    _, performed = await post_action(session, services.base_url, step, "o-1")
    resource_id = performed[step.id_field]

    first = await post_compensation_by_key(session, services.base_url, step, "o-1", 1)
    again = await post_compensation_by_key(session, services.base_url, step, "o-1", 1)
    by_id = await post_compensation(session, services.base_url, step, resource_id, 1)

    assert first == (
        201,
        {
            step.id_field: resource_id,
            "orderId": "o-1",
            "attempt": 1,
            "replayed": False,
            "status": step.compensated_status,
            "undone": True,
            "idempotencyKey": key_of("o-1", step),
        },
    )
    assert again == (200, {**first[1], "replayed": True})
    assert by_id == (
        200,
        {
            step.id_field: resource_id,
            "orderId": "o-1",
            "attempt": 1,
            "replayed": True,
            "status": step.compensated_status,
        },
    ), "the compensation by id answers as it always did"
    ledger = await get_json(session, f"{services.url(step.name)}/ledger?orderId=o-1")
    assert [(e["kind"], e[step.id_field], e["idempotencyKey"]) for e in ledger["entries"]] == [
        (step.action_effect.value, resource_id, key_of("o-1", step)),
        (step.compensation_effect.value, resource_id, None),
    ]
    assert ledger["tombstones"] == []
    stats = services.stats(step.name)
    assert stats["side_effects_per_order"] == {
        "o-1": {step.action_effect.value: 1, step.compensation_effect.value: 1}
    }
    assert (stats["replays"], stats["tombstones"]) == (2, 0)


@every_service
async def test_an_action_compensated_by_id_is_replayed_by_its_key(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    _, performed = await post_action(session, services.base_url, step, "o-1")
    resource_id = performed[step.id_field]
    assert (await post_compensation(session, services.base_url, step, resource_id, 1))[0] == 201

    status, body = await post_compensation_by_key(session, services.base_url, step, "o-1", 2)

    assert (status, body[step.id_field], body["undone"], body["replayed"]) == (
        200,
        resource_id,
        True,
        True,
    )
    assert counts(services, step) == (1, 1, 0)


@every_service
async def test_a_key_never_performed_is_undone_for_good_and_a_late_action_with_it_is_refused(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    first = await post_compensation_by_key(session, services.base_url, step, "o-1", 1)
    late = await post_action(session, services.base_url, step, "o-1", attempt=1)
    newer = await post_action(session, services.base_url, step, "o-1", attempt=2)
    again = await post_compensation_by_key(session, services.base_url, step, "o-1", 1)

    key = key_of("o-1", step)
    assert first == (
        200,
        {
            "idempotencyKey": key,
            "orderId": "o-1",
            "attempt": 1,
            "undone": False,
            "replayed": False,
            "status": "nothing-to-undo",
        },
    )
    for refused, attempt in ((late, 1), (newer, 2)):
        assert refused[0] == 409
        assert {k: refused[1][k] for k in ("error", "idempotencyKey", "orderId", "attempt")} == {
            "error": "compensated",
            "idempotencyKey": key,
            "orderId": "o-1",
            "attempt": attempt,
        }
        assert refused[1]["undoneByAttempt"] == 1
        assert refused[1]["undoneAt"].endswith("Z")
    assert again == (200, {**first[1], "replayed": True})
    assert services.ledger_entries(step.name) == []
    assert [(t.idempotency_key, t.order_id, t.attempt) for t in services.tombstones(step.name)] == [
        (key, "o-1", 1)
    ]
    assert counts(services, step) == (0, 0, 1)
    assert services.stats(step.name)["actions_refused_after_undo"] == 2


@every_service
async def test_an_action_still_in_flight_when_its_key_is_undone_performs_nothing(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    # The action is held before it reaches the ledger, as a slow request of an attempt whose
    # deadline passed; the undo overtakes it.
    services.replace_fault_plan(
        step.name,
        FaultPlan(
            rules=(FaultRule(FaultKind.LATENCY, operation=step.action, times=1, delay_seconds=1.0),)
        ),
    )
    in_flight = asyncio.create_task(post_action(session, services.base_url, step, "o-1"))
    await eventually(
        lambda: services.stats(step.name)["faults_injected"]["latency"] == 1,
        "the action to be held",
    )

    undo = await post_compensation_by_key(session, services.base_url, step, "o-1", 1)
    assert not in_flight.done(), "the undo must overtake the held action"
    late = await in_flight

    assert (undo[0], undo[1]["undone"]) == (200, False)
    assert (late[0], late[1]["error"]) == (409, "compensated")
    assert services.ledger_entries(step.name) == []
    assert services.stats(step.name)["actions_refused_after_undo"] == 1


@pytest.mark.parametrize(
    "plan",
    [
        FaultPlan(rules=(FaultRule(FaultKind.DISPATCHED, operation="cancel", times=1),)),
        FaultPlan(rules=(FaultRule(FaultKind.DISPATCHED, operation="ship"),)),
        FaultPlan(dispatch_after_seconds=0),
    ],
    ids=["dispatched-before-the-cancel", "dispatched-when-shipped", "dispatched-after-a-time"],
)
async def test_a_dispatched_shipment_cannot_be_cancelled_by_its_key(
    services: SimulatedServices, session: aiohttp.ClientSession, plan: FaultPlan
) -> None:
    services.replace_fault_plan(SHIPPING.name, plan)
    _, shipped = await post_action(session, services.base_url, SHIPPING, "o-1")
    shipment_id = shipped["shipmentId"]

    first = await post_compensation_by_key(session, services.base_url, SHIPPING, "o-1", 1)
    services.replace_fault_plan(SHIPPING.name, FaultPlan())
    again = await post_compensation_by_key(session, services.base_url, SHIPPING, "o-1", 1)
    by_id = await post_compensation(session, services.base_url, SHIPPING, shipment_id, 1)
    replayed = await post_action(session, services.base_url, SHIPPING, "o-1")

    assert first[0] == again[0] == by_id[0] == 422
    assert first[1]["error"] == again[1]["error"] == by_id[1]["error"] == "already-dispatched"
    assert {k: first[1][k] for k in ("shipmentId", "orderId", "idempotencyKey")} == {
        "shipmentId": shipment_id,
        "orderId": "o-1",
        "idempotencyKey": "o-1:ship",
    }
    assert first[1]["dispatchedAt"].endswith("Z")
    assert "idempotencyKey" not in by_id[1], "the cancel by id answers as it always did"
    assert (replayed[0], replayed[1]["status"]) == (200, "dispatched")
    assert [e.kind.value for e in services.ledger_entries(SHIPPING.name)] == ["shipment"]
    stats = services.stats(SHIPPING.name)
    assert (stats["dispatched"], stats["cancellations"], stats["cancellations_refused"]) == (
        1,
        0,
        3,
    )
    assert (stats["tombstones"], stats["actions_refused_after_undo"]) == (0, 0)


@every_service
async def test_a_compensation_by_key_of_a_stale_attempt_is_refused_and_does_nothing(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    performed = await post_action(session, services.base_url, step, "o-1", attempt=3)
    assert performed[0] == 201
    await post_action(session, services.base_url, step, "o-2", attempt=3, key="o-2:other")

    of_performed = await post_compensation_by_key(session, services.base_url, step, "o-1", 2)
    of_unperformed = await post_compensation_by_key(session, services.base_url, step, "o-2", 2)
    current = await post_action(session, services.base_url, step, "o-2", attempt=3)

    for refused in (of_performed, of_unperformed):
        assert refused[0] == 409
        assert (refused[1]["error"], refused[1]["currentAttempt"]) == ("stale-attempt", 3)
    assert current[0] == 201, "a refused undo leaves the key usable"
    assert counts(services, step) == (3, 0, 0)
    assert services.stats(step.name)["stale_writes_refused"] == 2


@every_service
async def test_a_compensation_by_key_raises_the_fence_whether_or_not_it_undid_anything(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    _, performed = await post_action(session, services.base_url, step, "o-1", attempt=1)
    assert (await post_compensation_by_key(session, services.base_url, step, "o-1", 4))[0] == 201
    assert (await post_compensation_by_key(session, services.base_url, step, "o-2", 4))[0] == 200

    late_actions = [
        await post_action(session, services.base_url, step, order, attempt=3, key=f"{order}:b")
        for order in ("o-1", "o-2")
    ]
    late_compensation = await post_compensation(
        session, services.base_url, step, performed[step.id_field], 3
    )

    assert [(s, b["error"], b["currentAttempt"]) for s, b in late_actions] == [
        (409, "stale-attempt", 4),
        (409, "stale-attempt", 4),
    ]
    assert (late_compensation[0], late_compensation[1]["currentAttempt"]) == (409, 4)
    assert counts(services, step) == (1, 1, 1)


@pytest.mark.parametrize(
    ("kind", "status", "error", "done", "retry_replayed"),
    [
        (FaultKind.TRANSIENT, 503, "transient", False, False),
        (FaultKind.PERMANENT, 422, "permanent", False, False),
        (FaultKind.LOST_RESPONSE, 503, "transient", True, True),
    ],
    ids=lambda value: getattr(value, "value", None),
)
@pytest.mark.parametrize("performed", [True, False], ids=["performed", "never-performed"])
@every_service
async def test_compensation_faults_apply_to_the_compensation_by_key(
    services: SimulatedServices,
    session: aiohttp.ClientSession,
    step: ServiceDeclaration,
    performed: bool,
    kind: FaultKind,
    status: int,
    error: str,
    done: bool,
    retry_replayed: bool,
) -> None:
    if performed:
        assert (await post_action(session, services.base_url, step, "o-1"))[0] == 201
    services.replace_fault_plan(
        step.name, FaultPlan(rules=(FaultRule(kind, operation=step.compensation, times=1),))
    )
    before = counts(services, step)

    faulted = await post_compensation_by_key(session, services.base_url, step, "o-1", 1)
    after_fault = counts(services, step)
    retry = await post_compensation_by_key(session, services.base_url, step, "o-1", 1)

    undone = (int(performed), int(performed), int(not performed))
    assert (faulted[0], faulted[1]["error"]) == (status, error)
    assert after_fault == (undone if done else before)
    expected_status = 200 if retry_replayed or not performed else 201
    assert (retry[0], retry[1]["undone"], retry[1]["replayed"]) == (
        expected_status,
        performed,
        retry_replayed,
    )
    assert counts(services, step) == undone
    assert services.stats(step.name)["faults_injected"][kind.value] == 1


async def test_a_stalled_compensation_by_key_undoes_nothing_until_a_retry_gets_through(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    services.replace_fault_plan(
        STOCK.name, FaultPlan(rules=(FaultRule(FaultKind.HANG, operation="release", times=1),))
    )

    stalled = asyncio.create_task(
        post_compensation_by_key(
            session,
            services.base_url,
            STOCK,
            "o-1",
            1,
            client_timeout=aiohttp.ClientTimeout(total=0.5),
        )
    )
    await eventually(
        lambda: services.stats(STOCK.name)["faults_injected"]["hang"] == 1, "the undo to stall"
    )
    with pytest.raises(TimeoutError):
        await stalled
    assert counts(services, STOCK) == (0, 0, 0)

    retry = await post_compensation_by_key(session, services.base_url, STOCK, "o-1", 1)

    assert (retry[0], retry[1]["status"]) == (200, "nothing-to-undo")
    assert counts(services, STOCK) == (0, 0, 1)


async def test_an_operation_mix_of_the_compensation_applies_to_the_compensation_by_key(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    services.replace_fault_plan(
        PAYMENT.name,
        FaultPlan(operation_probabilities={"refund": {FaultKind.PERMANENT: 1.0}}),
    )
    assert (await post_action(session, services.base_url, PAYMENT, "o-1"))[0] == 201

    status, body = await post_compensation_by_key(session, services.base_url, PAYMENT, "o-1", 1)

    assert (status, body["error"]) == (422, "permanent")
    assert "cannot be refunded" in body["message"]
    assert counts(services, PAYMENT) == (1, 0, 0)


@every_service
async def test_a_key_of_another_order_is_refused_as_key_reuse(
    services: SimulatedServices, session: aiohttp.ClientSession, step: ServiceDeclaration
) -> None:
    await post_action(session, services.base_url, step, "o-1", key="used")
    await post_compensation_by_key(session, services.base_url, step, "o-1", 1, key="undone")

    answers = [
        await post_compensation_by_key(session, services.base_url, step, "o-2", 1, key=key)
        for key in ("used", "undone")
    ]

    assert [(status, body["error"]) for status, body in answers] == [
        (422, "idempotency-key-reuse"),
        (422, "idempotency-key-reuse"),
    ]
    assert counts(services, step) == (1, 0, 1)
    assert services.stats(step.name)["idempotency_key_reuse_refused"] == 2


@pytest.mark.parametrize(
    ("headers", "body", "error"),
    [
        ({}, {"orderId": "o-1", "attempt": 1}, "missing-idempotency-key"),
        (
            {"Idempotency-Key": "k" * 257},
            {"orderId": "o-1", "attempt": 1},
            "missing-idempotency-key",
        ),
        ({"Idempotency-Key": "k"}, {"attempt": 1}, "invalid-request"),
        ({"Idempotency-Key": "k"}, {"orderId": "o-1", "attempt": 0}, "invalid-request"),
        ({"Idempotency-Key": "k"}, ["o-1", 1], "invalid-request"),
    ],
    ids=["no-key", "long-key", "no-order", "attempt-zero", "not-an-object"],
)
async def test_a_malformed_compensation_by_key_is_400_and_does_nothing(
    services: SimulatedServices,
    session: aiohttp.ClientSession,
    headers: dict[str, str],
    body: object,
    error: str,
) -> None:
    async with session.post(
        f"{services.base_url}{STOCK.compensation_by_key_path}",
        json=body,
        headers=headers,
        timeout=TIMEOUT,
    ) as response:
        status, answer = response.status, await response.json()

    assert (status, answer["error"]) == (400, error)
    assert counts(services, STOCK) == (0, 0, 0)
    assert services.stats(STOCK.name)["requests"] == 1


async def test_the_evidence_shows_no_action_after_an_order_began_compensating(
    services: SimulatedServices, session: aiohttp.ClientSession
) -> None:
    await post_action(session, services.base_url, STOCK, "o-1")
    await post_compensation_by_key(session, services.base_url, STOCK, "o-1", 1)
    await post_compensation_by_key(session, services.base_url, STOCK, "o-2", 1)
    await post_action(session, services.base_url, STOCK, "o-1")
    await post_action(session, services.base_url, STOCK, "o-2")
    await post_action(session, services.base_url, STOCK, "o-3")

    ledger = await get_json(session, f"{services.url(STOCK.name)}/ledger")
    began: dict[str, dt.datetime] = {}
    undoing = [(e["orderId"], e["at"]) for e in ledger["entries"] if e["kind"] == "release"] + [
        (t["orderId"], t["at"]) for t in ledger["tombstones"]
    ]
    for order, at in undoing:
        moment = dt.datetime.fromisoformat(at)
        began[order] = min(began.get(order, moment), moment)
    late = [
        e
        for e in services.ledger_entries(STOCK.name)
        if e.role is Role.ACTION
        and e.order_id in began
        and dt.datetime.fromisoformat(e.at) > began[e.order_id]
    ]

    assert sorted(began) == ["o-1", "o-2"]
    assert late == []
    assert [(e.order_id, e.kind.value) for e in services.ledger_entries(STOCK.name)] == [
        ("o-1", "reservation"),
        ("o-1", "release"),
        ("o-3", "reservation"),
    ]
    one_order = await get_json(session, f"{services.url(STOCK.name)}/ledger?orderId=o-2")
    assert (one_order["entries"], [t["orderId"] for t in one_order["tombstones"]]) == ([], ["o-2"])
    stats = services.stats(STOCK.name)
    assert (stats["tombstones"], stats["actions_refused_after_undo"], stats["replays"]) == (1, 1, 1)


async def test_undone_keys_and_undos_are_kept_by_the_ledger_file_across_a_restart(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    before = SimulatedServices(ledger_path=ledger)
    await before.start()
    try:
        await post_compensation_by_key(session, before.base_url, STOCK, "o-1", 2)
        await post_action(session, before.base_url, PAYMENT, "o-1", attempt=2)
        await post_compensation_by_key(session, before.base_url, PAYMENT, "o-1", 2)
    finally:
        await before.stop()

    after = SimulatedServices(ledger_path=ledger)
    await after.start()
    try:
        late = await post_action(session, after.base_url, STOCK, "o-1", attempt=2)
        stale = await post_action(session, after.base_url, STOCK, "o-1", attempt=1, key="o-1:b")
        replayed = await post_compensation_by_key(session, after.base_url, PAYMENT, "o-1", 2)
        undo_again = await post_compensation_by_key(session, after.base_url, STOCK, "o-1", 2)
        tombstones = after.tombstones(STOCK.name)
        stock_entries = after.ledger_entries(STOCK.name)
    finally:
        await after.stop()

    assert (late[0], late[1]["error"]) == (409, "compensated")
    assert (stale[0], stale[1]["currentAttempt"]) == (409, 2)
    assert (replayed[0], replayed[1]["status"], replayed[1]["replayed"]) == (200, "refunded", True)
    assert (undo_again[0], undo_again[1]["replayed"]) == (200, True)
    assert [(t.idempotency_key, t.order_id, t.attempt) for t in tombstones] == [
        ("o-1:reserve", "o-1", 2)
    ]
    assert stock_entries == []
