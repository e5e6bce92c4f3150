"""The Service Bus listener's restart backoff: exponential from about 0.1 s, capped at a few
seconds, with jitter in the upper half of each step so listeners do not reconnect in step."""

from devhost.triggers.servicebus import (
    RESTART_BASE_SECONDS,
    RESTART_CAP_SECONDS,
    restart_delay,
)


def test_each_restart_waits_within_the_upper_half_of_a_doubling_step() -> None:
    for attempt in range(1, 12):
        step = min(RESTART_CAP_SECONDS, RESTART_BASE_SECONDS * 2 ** (attempt - 1))
        delays = [restart_delay(attempt) for _ in range(200)]
        assert all(step / 2 <= delay <= step for delay in delays), attempt
        assert len(set(delays)) > 1, "the delays are jittered"


def test_the_wait_is_capped_however_long_the_failures_last() -> None:
    assert max(restart_delay(attempt) for attempt in range(1, 10_000, 97)) <= RESTART_CAP_SECONDS
