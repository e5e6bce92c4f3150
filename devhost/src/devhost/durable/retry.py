"""DTFx retry policy for ``call_activity_with_retry`` / ``call_sub_orchestrator_with_retry``.

Durable Task's ``RetryInterceptor``: after the n-th failed attempt (n counted from 1) the
next delay is ``firstRetryInterval * backoffCoefficient ** (n - 1)``, capped at
``maxRetryInterval``; no further attempt once ``retryTimeout`` has elapsed since the first
attempt started; at most ``maxNumberOfAttempts`` attempts.  The Python SDK 1.7 only sends
the first interval and the attempt count; the other fields are read when present under
the names the JavaScript SDK and the extension use, so a ``RetryOptions`` subclass can set them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

_NO_LIMIT_MS = float("inf")


@dataclass(frozen=True)
class RetryPolicy:
    """The retry options of one action."""

    first_retry_interval_ms: float
    max_number_of_attempts: int
    backoff_coefficient: float = 1.0
    max_retry_interval_ms: float = _NO_LIMIT_MS
    retry_timeout_ms: float = _NO_LIMIT_MS

    @classmethod
    def from_action(cls, retry_options: dict[str, Any]) -> RetryPolicy:
        """Read the ``retryOptions`` object of a ``...WithRetry`` action."""
        return cls(
            first_retry_interval_ms=float(retry_options["firstRetryIntervalInMilliseconds"]),
            max_number_of_attempts=int(retry_options["maxNumberOfAttempts"]),
            backoff_coefficient=float(retry_options.get("backoffCoefficient", 1.0)),
            max_retry_interval_ms=float(
                retry_options.get("maxRetryIntervalInMilliseconds", _NO_LIMIT_MS)
            ),
            retry_timeout_ms=float(retry_options.get("retryTimeoutInMilliseconds", _NO_LIMIT_MS)),
        )

    def delay_after_failure(self, failed_attempts: int) -> dt.timedelta:
        """Delay before the retry that follows the ``failed_attempts``-th failure."""
        delay_ms = self.first_retry_interval_ms * self.backoff_coefficient ** (failed_attempts - 1)
        return dt.timedelta(milliseconds=min(delay_ms, self.max_retry_interval_ms))

    def timed_out(self, first_attempt_at: dt.datetime, now: dt.datetime) -> bool:
        """Whether ``retryTimeout`` forbids another attempt at ``now``."""
        if self.retry_timeout_ms == _NO_LIMIT_MS:
            return False
        return now >= first_attempt_at + dt.timedelta(milliseconds=self.retry_timeout_ms)
