"""The app's settings, each declared once: its name, default, parser and meaning.

`Settings.from_environ` reads them and fails with a `SettingsError` naming the setting and
what it accepts, also when settings disagree: the retry budget against its factors (C4), the
backlog bound against the running cap (C5), the catch-up window against the sweep window
(U2). `Settings` hands the service layer domain values (`budget`, `timeouts`,
`supervisor_policy`, ...) for D3, E1, E2, E7, E9, R1, U2, U4, U5, U7, C2, C4 and C5. Host and
connection settings are not declared here (docs/settings.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from domain.operator_access import (
    AUTH_EASYAUTH,
    AUTH_KEYS,
    OperatorKey,
    OperatorKeysError,
    parse_keys,
)
from domain.policies import (
    AGENT_TRANSPORT_ACTIVITY,
    AGENT_TRANSPORT_SERVICEBUS,
    DEFAULT_MAX_FAILURES,
    DEFAULT_RETRY_BUDGET,
    AgentPolicy,
    CatchUpWindowTooNarrow,
    RetryBudget,
    RetryBudgetTooSmall,
    ScanBounds,
    SupervisorPolicy,
    Timeouts,
    tries_per_request,
)
from domain.workflow import DEFAULT_ORDER_STEPS, UnknownStep, step_list

T = TypeVar("T")
STATE_STORES = ("sqlite", "cosmos")
# Enough for host.json's 32 activities and 32 Service Bus messages of one listener in flight
# at once, each waiting on one blocking call (adapters/blocking_calls.py).
DEFAULT_BLOCKING_CALL_THREADS = 64
IDLE_TICK = "0 */10 * * * *"
"""The timers' cadence on Azure: all at the same moments, ten minutes apart, so that at rest a
Flex Consumption instance stays idle long enough to scale in (docs/deployment.md, "What it
costs"); local runs tick faster (local.settings.sample.json)."""
Parser = Callable[[str, str], T]
"""Turns the text of the setting named by its second argument into a value, or raises."""


class SettingsError(ValueError):
    """An app setting has a value this app cannot run with."""


def _text(value: str, name: str) -> str:
    if not value.strip():
        raise SettingsError(f"{name} must not be empty")
    return value.strip()


def _positive_int(value: str, name: str) -> int:
    try:
        parsed = int(value)
    except ValueError:
        raise SettingsError(f"{name} must be a positive integer, got {value!r}") from None
    if parsed < 1:
        raise SettingsError(f"{name} must be a positive integer, got {value!r}")
    return parsed


def _seconds(value: str, name: str) -> float:
    try:
        parsed = float(value)
    except ValueError:
        raise SettingsError(f"{name} must be a number of seconds, got {value!r}") from None
    if not parsed >= 0:
        raise SettingsError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return parsed


def _whole_above_zero(value: str, name: str) -> int:
    try:
        parsed = int(value)
    except ValueError:
        raise SettingsError(f"{name} must be a whole number, got {value!r}") from None
    if parsed <= 0:
        raise SettingsError(f"{name} must be > 0, got {value!r}")
    return parsed


def _number_above_zero(value: str, name: str) -> float:
    try:
        parsed = float(value)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {value!r}") from None
    if not parsed > 0:
        raise SettingsError(f"{name} must be > 0, got {value!r}")
    return parsed


def _ncrontab(value: str, name: str) -> str:
    if len(value.split()) != 6:
        raise SettingsError(
            f"{name} must be a six-field NCRONTAB expression "
            f"('{{second}} {{minute}} {{hour}} {{day}} {{month}} {{day-of-week}}'), got {value!r}"
        )
    return value.strip()


def _queue_list(value: str, name: str) -> frozenset[str]:
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def _step_names(value: str, name: str) -> tuple[str, ...]:
    names = [part.strip() for part in value.split(",") if part.strip()]
    try:
        return tuple(step.name for step in step_list(names))
    except UnknownStep as error:
        raise SettingsError(f"{name}: {error}") from None


def _operator_keys(value: str, name: str) -> tuple[OperatorKey, ...]:
    try:
        return parse_keys(value)
    except OperatorKeysError as error:
        raise SettingsError(f"{name}: {error}") from None


def _one_of(*choices: str) -> Parser[str]:
    def parse(value: str, name: str) -> str:
        if value not in choices:
            accepted = " or ".join(repr(choice) for choice in choices)
            raise SettingsError(f"{name} must be {accepted}, got {value!r}")
        return value

    return parse


@dataclass(frozen=True)
class Declaration:
    """One app setting: its name, its value when unset, how its text is read, what it means.

    With `blank_is_default`, an empty value counts as unset (the setting keeps its default);
    otherwise an empty value goes to the parser like any other.
    """

    name: str
    default: object
    parse: Parser[object]
    meaning: str
    blank_is_default: bool = False


_DECLARATION = "declaration"


def _setting(
    name: str, default: T, parse: Parser[T], meaning: str, *, blank_is_default: bool = False
) -> T:
    """A `Settings` field declared with everything about its app setting."""
    declared = Declaration(name, default, parse, meaning, blank_is_default)
    return field(default=default, metadata={_DECLARATION: declared})


@dataclass(frozen=True)
class Settings:
    """The app settings this app reads, with their defaults."""

    orders_queue: str = _setting("ORDERS_QUEUE", "orders", _text, "submissions (S1)")
    agent_responses_queue: str = _setting(
        "AGENT_RESPONSES_QUEUE", "agent-responses", _text, "agent -> scheduler (E3)"
    )
    operator_alerts_queue: str = _setting(
        "OPERATOR_ALERTS_QUEUE", "operator-alerts", _text, "operator alerts (S3, E8, U4, C2)"
    )
    reply_queues: frozenset[str] = _setting(
        "REPLY_QUEUES",
        frozenset(),
        _queue_list,
        "comma-separated allow-list of reply queues apps may name (R1)",
    )
    agent_transport: str = _setting(
        "AGENT_TRANSPORT",
        AGENT_TRANSPORT_SERVICEBUS,
        _one_of(AGENT_TRANSPORT_SERVICEBUS, AGENT_TRANSPORT_ACTIVITY),
        "the agent behind the Service Bus queue pair, or run as an activity (E1)",
    )
    order_steps: tuple[str, ...] = _setting(
        "ORDER_STEPS",
        DEFAULT_ORDER_STEPS,
        _step_names,
        "the steps a new order runs, in order, comma-separated (domain/workflow.py)",
    )
    stock_requests_queue: str = _setting(
        "STOCK_REQUESTS_QUEUE", "stock-requests", _text, "scheduler -> stock agent (E1)"
    )
    payment_requests_queue: str = _setting(
        "PAYMENT_REQUESTS_QUEUE", "payment-requests", _text, "scheduler -> payment agent (E1)"
    )
    shipping_requests_queue: str = _setting(
        "SHIPPING_REQUESTS_QUEUE", "shipping-requests", _text, "scheduler -> shipping agent (E1)"
    )
    stock_service_url: str | None = _setting(
        "STOCK_SERVICE_URL",
        None,
        _text,
        "base URL of the remote stock service; the stock agent cannot run without it",
        blank_is_default=True,
    )
    payment_service_url: str | None = _setting(
        "PAYMENT_SERVICE_URL",
        None,
        _text,
        "base URL of the remote payment service; the payment agent cannot run without it",
        blank_is_default=True,
    )
    shipping_service_url: str | None = _setting(
        "SHIPPING_SERVICE_URL",
        None,
        _text,
        "base URL of the remote shipping service; the shipping agent cannot run without it",
        blank_is_default=True,
    )
    state_store: str = _setting(
        "STATE_STORE", "sqlite", _one_of(*STATE_STORES), "the state store and orders database"
    )
    sqlite_directory: str = _setting(
        "SQLITE_DIRECTORY", ".data", _text, "where the SQLite state store and orders database live"
    )
    cosmos_database: str = _setting(
        "COSMOS_DATABASE", "orderprocessing", _text, "the Cosmos database of the containers"
    )
    cosmos_state_container: str = _setting(
        "COSMOS_STATE_CONTAINER", "state", _text, "the Cosmos container of the state store"
    )
    cosmos_orders_container: str = _setting(
        "COSMOS_ORDERS_CONTAINER", "orders", _text, "the Cosmos container of the orders database"
    )
    cosmos_deadline_index_container: str = _setting(
        "COSMOS_DEADLINE_INDEX_CONTAINER",
        "deadlines",
        _text,
        "the Cosmos container of the supervisor's recovery index (U3)",
        blank_is_default=True,
    )
    finished_retention_seconds: int = _setting(
        "FINISHED_RETENTION_SECONDS",
        30 * 86400,
        _whole_above_zero,
        "how long a finished order keeps its order document and orchestration histories "
        "before the supervisor retires it; its state record stays, as a tombstone (C3)",
        blank_is_default=True,
    )
    cosmos_retry_total: int = _setting(
        "COSMOS_RETRY_TOTAL",
        5,
        _whole_above_zero,
        "the SDK's retries of 429 and transient errors (C4)",
        blank_is_default=True,
    )
    cosmos_retry_backoff_max_seconds: int = _setting(
        "COSMOS_RETRY_BACKOFF_MAX_SECONDS",
        5,
        _whole_above_zero,
        "the longest wait between two of the SDK's retries",
        blank_is_default=True,
    )
    cosmos_connection_timeout_seconds: float = _setting(
        "COSMOS_CONNECTION_TIMEOUT_SECONDS",
        5.0,
        _number_above_zero,
        "how long one Cosmos request may take to connect",
        blank_is_default=True,
    )
    cosmos_read_timeout_seconds: float = _setting(
        "COSMOS_READ_TIMEOUT_SECONDS",
        10.0,
        _number_above_zero,
        "how long one Cosmos request may wait for its answer",
        blank_is_default=True,
    )
    cosmos_operation_timeout_seconds: float = _setting(
        "COSMOS_OPERATION_TIMEOUT_SECONDS",
        30.0,
        _number_above_zero,
        "how long one store call may take, its SDK retries included",
        blank_is_default=True,
    )
    starter_schedule: str = _setting(
        "STARTER_SCHEDULE",
        IDLE_TICK,
        _ncrontab,
        "NCRONTAB cadence of the starter, the backstop for the orders a submission did not "
        "start: past the running cap, waiting out a retry delay, or whose start failed (D1, "
        "C5, U7)",
    )
    supervisor_schedule: str = _setting(
        "SUPERVISOR_SCHEDULE",
        IDLE_TICK,
        _ncrontab,
        "NCRONTAB cadence of the supervisor; an expired deadline is recovered within one "
        "interval (U1, U7)",
    )
    supervisor_catchup_schedule: str = _setting(
        "SUPERVISOR_CATCHUP_SCHEDULE",
        "0 0 * * * *",
        _ncrontab,
        "NCRONTAB cadence of the supervisor's catch-up over deadlines older than its window "
        "(U2, U7)",
    )
    deadletter_watch_schedule: str = _setting(
        "DEADLETTER_WATCH_SCHEDULE",
        IDLE_TICK,
        _ncrontab,
        "NCRONTAB cadence of the dead-letter watcher, which alerts once per new dead letter of "
        "every queue the app consumes (S3, E8)",
    )
    step_timeout_seconds: float = _setting(
        "STEP_TIMEOUT_SECONDS", 30.0, _seconds, "CompleteBy budget of one step (E2)"
    )
    claim_timeout_seconds: float = _setting(
        "CLAIM_TIMEOUT_SECONDS",
        60.0,
        _seconds,
        "provisional CompleteBy of a claim, before the orchestration sets its own (D3)",
    )
    compensation_timeout_seconds: float = _setting(
        "COMPENSATION_TIMEOUT_SECONDS", 60.0, _seconds, "deadline of a compensation run (C2)"
    )
    max_failures: int = _setting(
        "MAX_FAILURES",
        DEFAULT_MAX_FAILURES,
        _positive_int,
        "expired attempts before the supervisor gives up (U4)",
    )
    retry_delay_seconds: float = _setting(
        "RETRY_DELAY_SECONDS",
        1.0,
        _seconds,
        "wait before the starter may retry an expired attempt (U4)",
    )
    long_wait_after_failures: int = _setting(
        "LONG_WAIT_AFTER_FAILURES",
        2,
        _positive_int,
        "failures from which a retry waits LONG_RETRY_DELAY_SECONDS instead (U5)",
    )
    long_retry_delay_seconds: float = _setting(
        "LONG_RETRY_DELAY_SECONDS", 30.0, _seconds, "the longer wait before a retry (U5)"
    )
    retry_budget: int = _setting(
        "RETRY_BUDGET",
        DEFAULT_RETRY_BUDGET,
        _positive_int,
        "the calls to its remote services a new order may make in its whole life, kept in its "
        "record: every agent try, redelivery, supervisor retry, compensation resume and "
        "operator action spends from it; each request draws RETRY_BUDGET / (2 x steps + "
        "MAX_FAILURES - 1) tries of it (C4)",
    )
    agent_delivery_attempts: int = _setting(
        "AGENT_DELIVERY_ATTEMPTS",
        2,
        _positive_int,
        "how often messaging may deliver one agent request: the agent request queues' "
        "MaxDeliveryCount; the agent splits a request's tries over them (C4)",
    )
    agent_backoff_base_seconds: float = _setting(
        "AGENT_BACKOFF_BASE_SECONDS", 0.1, _seconds, "the agent's first backoff ceiling (E9)"
    )
    agent_backoff_max_seconds: float = _setting(
        "AGENT_BACKOFF_MAX_SECONDS", 5.0, _seconds, "the agent's largest backoff ceiling (E9)"
    )
    breaker_failure_threshold: int = _setting(
        "BREAKER_FAILURE_THRESHOLD",
        5,
        _positive_int,
        "failures in a row that open the agent's circuit breaker (E9)",
    )
    breaker_reset_seconds: float = _setting(
        "BREAKER_RESET_SECONDS",
        30.0,
        _seconds,
        "how long the open breaker refuses calls before a trial call (E9)",
    )
    store_page_size: int = _setting(
        "STORE_PAGE_SIZE", 100, _positive_int, "records per page of a store scan (U2)"
    )
    starter_max_claims: int = _setting(
        "STARTER_MAX_CLAIMS", 200, _positive_int, "records one starter run may claim (D1)"
    )
    starter_max_pages: int = _setting(
        "STARTER_MAX_PAGES", 20, _positive_int, "pages one starter run may read (D1)"
    )
    max_running_orders: int = _setting(
        "MAX_RUNNING_ORDERS",
        500,
        _positive_int,
        "orders Processing or Compensating at once; the starter claims no more (C5)",
    )
    max_backlog_orders: int = _setting(
        "MAX_BACKLOG_ORDERS",
        10000,
        _positive_int,
        "orders Pending, Processing or Compensating at once; a new order above it is "
        "answered `rejected` and not stored (C5)",
    )
    backlog_recount_seconds: float = _setting(
        "BACKLOG_RECOUNT_SECONDS",
        1.0,
        _seconds,
        "how long one instance's count of the backlog serves its submissions before it "
        "counts again; between counts it adds the orders it accepted itself (C5)",
    )
    supervisor_window_seconds: float = _setting(
        "SUPERVISOR_WINDOW_SECONDS",
        86400.0,
        _seconds,
        "how far back a sweep looks for expired deadlines (U2)",
    )
    supervisor_catchup_window_seconds: int = _setting(
        "SUPERVISOR_CATCHUP_WINDOW_SECONDS",
        30 * 86400,
        _whole_above_zero,
        "how far back the catch-up looks for deadlines older than SUPERVISOR_WINDOW_SECONDS; "
        "must be longer than it; older ones are found by one query of the state records (U2)",
    )
    supervisor_max_items: int = _setting(
        "SUPERVISOR_MAX_ITEMS", 500, _positive_int, "records one sweep may read (U2)"
    )
    supervisor_max_pages: int = _setting(
        "SUPERVISOR_MAX_PAGES", 20, _positive_int, "pages one sweep may read (U2)"
    )
    outbox_grace_seconds: float = _setting(
        "OUTBOX_GRACE_SECONDS",
        60.0,
        _seconds,
        "how long a state record's outbox may stay owed before the supervisor's sweep relays "
        "it: longer than an activity's store retries, so the relay rarely repeats a delivery "
        "still under way; a message owed goes out within this plus one SUPERVISOR_SCHEDULE "
        "interval (C6)",
    )
    console_auth: str = _setting(
        "CONSOLE_AUTH",
        AUTH_KEYS,
        _one_of(AUTH_KEYS, AUTH_EASYAUTH),
        "how the operator console knows its caller: named keys (CONSOLE_KEYS), or the "
        "principal and app roles of App Service authentication, only when it is in front (E8)",
    )
    console_keys: tuple[OperatorKey, ...] = _setting(
        "CONSOLE_KEYS",
        (),
        _operator_keys,
        "the operator console's named keys: comma-separated name:role:sha256 entries, role "
        "read or act, the SHA-256 of the key in hex, never the key (E8)",
        blank_is_default=True,
    )
    blocking_call_threads: int = _setting(
        "BLOCKING_CALL_THREADS",
        DEFAULT_BLOCKING_CALL_THREADS,
        _positive_int,
        "threads per worker process for the blocking store and settlement calls of async "
        "function code; the event loop's default executor would have min(32, CPUs + 4)",
    )

    def __post_init__(self) -> None:
        _ = self.budget  # C4: refuse a budget that leaves a request no try, at startup
        _ = self.supervisor_policy  # U2: refuse a catch-up that reaches no further, at startup
        if self.max_backlog_orders < self.max_running_orders:
            # C5: the backlog holds the running orders, so a smaller bound would reject new
            # orders before the starter could ever reach its cap.
            raise SettingsError(
                f"MAX_BACKLOG_ORDERS={self.max_backlog_orders} is below MAX_RUNNING_ORDERS="
                f"{self.max_running_orders}: the backlog counts the running orders too; raise "
                "MAX_BACKLOG_ORDERS or lower MAX_RUNNING_ORDERS"
            )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        """Read every declared setting from `environ`; unset ones keep their default."""
        values: dict[str, Any] = {}
        for field_name, declared in _declared_fields():
            raw = environ.get(declared.name)
            if raw is None or (declared.blank_is_default and not raw.strip()):
                continue
            values[field_name] = declared.parse(raw, declared.name)
        return cls(**values)

    @property
    def budget(self) -> RetryBudget:
        """C4's one budget, as a new order of ORDER_STEPS gets it from RETRY_BUDGET."""
        try:
            return RetryBudget.for_order(
                self.retry_budget,
                steps=len(self.order_steps),
                supervisor_attempts=self.max_failures,
            )
        except RetryBudgetTooSmall:
            requests = 2 * len(self.order_steps) + self.max_failures - 1
            raise SettingsError(
                f"RETRY_BUDGET={self.retry_budget} gives a request no try: an order of "
                f"{len(self.order_steps)} steps (ORDER_STEPS) with MAX_FAILURES="
                f"{self.max_failures} needs at least {requests}, one to do each step, one to "
                "undo it and one per retry; raise RETRY_BUDGET or lower the others"
            ) from None

    @property
    def tries_per_request(self) -> int:
        """How many tries each request of a step or an undo draws from its order's retry
        budget (C4)."""
        return tries_per_request(
            self.budget.total, steps=len(self.order_steps), supervisor_attempts=self.max_failures
        )

    @property
    def timeouts(self) -> Timeouts:
        return Timeouts(
            claim_seconds=self.claim_timeout_seconds,
            step_seconds=self.step_timeout_seconds,
            compensation_seconds=self.compensation_timeout_seconds,
        )

    @property
    def starter_scan(self) -> ScanBounds:
        return ScanBounds(self.store_page_size, self.starter_max_claims, self.starter_max_pages)

    @property
    def supervisor_policy(self) -> SupervisorPolicy:
        try:
            return SupervisorPolicy(
                max_failures=self.max_failures,
                retry_delay_seconds=self.retry_delay_seconds,
                long_wait_after_failures=self.long_wait_after_failures,
                long_retry_delay_seconds=self.long_retry_delay_seconds,
                window_seconds=self.supervisor_window_seconds,
                catch_up_window_seconds=self.supervisor_catchup_window_seconds,
                scan=ScanBounds(
                    self.store_page_size, self.supervisor_max_items, self.supervisor_max_pages
                ),
            )
        except CatchUpWindowTooNarrow:
            raise SettingsError(
                f"SUPERVISOR_CATCHUP_WINDOW_SECONDS={self.supervisor_catchup_window_seconds:g} "
                f"must be longer than SUPERVISOR_WINDOW_SECONDS="
                f"{self.supervisor_window_seconds:g}: the catch-up looks past the sweep window"
            ) from None

    @property
    def agent_policy(self) -> AgentPolicy:
        return AgentPolicy(
            backoff_base_seconds=self.agent_backoff_base_seconds,
            backoff_max_seconds=self.agent_backoff_max_seconds,
        )

    @property
    def consumed_queues(self) -> tuple[str, ...]:
        """The queues the app's Service Bus triggers consume, whose dead letters an operator
        triages and the dead-letter watcher reports: submissions (S1), agent requests (E1)
        and agent responses (E3)."""
        queues = (
            self.orders_queue,
            self.agent_responses_queue,
            self.stock_requests_queue,
            self.payment_requests_queue,
            self.shipping_requests_queue,
        )
        return tuple(dict.fromkeys(queues))

    def agent_queue(self, agent: str) -> str:
        """The request queue of a step's agent (E1): <AGENT>_REQUESTS_QUEUE."""
        return str(getattr(self, self._agent_field(agent, "requests_queue")))

    def service_url(self, agent: str) -> str:
        """The base URL of the remote service an agent calls, checked where it is needed."""
        field_name = self._agent_field(agent, "service_url")
        url: str | None = getattr(self, field_name)
        if url is None:
            raise SettingsError(f"the app setting {declaration(field_name).name} is not set")
        return url

    @staticmethod
    def _agent_field(agent: str, suffix: str) -> str:
        field_name = f"{agent}_{suffix}"
        if field_name not in {each.name for each in fields(Settings)}:
            raise SettingsError(f"no agent {agent!r} is configured (no setting for {suffix})")
        return field_name


def _declared_fields() -> list[tuple[str, Declaration]]:
    return [(each.name, each.metadata[_DECLARATION]) for each in fields(Settings)]


def declarations() -> tuple[Declaration, ...]:
    """Every app setting this app reads, in the order `Settings` declares them."""
    return tuple(declared for _, declared in _declared_fields())


def declaration(field_name: str) -> Declaration:
    """The declaration of the `Settings` field `field_name`."""
    return dict(_declared_fields())[field_name]
