"""Structured log records with the correlation ids (C9), through the logging module.

`get_logger(name)` gives an `AppLogger`: ``log.info("order received", order_id=..., created=True)``.
The correlation ids (``order_id``, ``instance_id``, ``attempt``, ``step``; an instance id
brings its order id and attempt) come as keywords or from `correlated`, which binds them for
a block and the code it awaits. Every field is both a record attribute (named in
``record.sas_fields``) and, rendered key=value by `render`, part of the message text. No
field may hold a customer id or an order's items.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

ORDER_ID = "order.id"
INSTANCE_ID = "instance.id"
ATTEMPT = "attempt"
STEP = "step"

FIELDS_ATTRIBUTE = "sas_fields"
"""Record attribute naming, in order, the fields the app added to the record."""

_RESERVED = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}

_NO_IDS: Mapping[str, object] = MappingProxyType({})
_context: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "sas_log_context", default=_NO_IDS
)


def correlation(
    *,
    order_id: str | None = None,
    instance_id: object | None = None,
    attempt: int | None = None,
    step: str | None = None,
) -> dict[str, object]:
    """The correlation fields under their contract names; an instance id
    ``"{OrderID}:{attempt}"`` also gives the order id and attempt it names."""
    fields: dict[str, object] = {}
    if instance_id is not None:
        text = str(instance_id)
        fields[INSTANCE_ID] = text
        named_order, separator, named_attempt = text.rpartition(":")
        if separator and named_attempt.isdigit():
            fields[ORDER_ID] = named_order
            fields[ATTEMPT] = int(named_attempt)
    if order_id is not None:
        fields[ORDER_ID] = order_id
    if attempt is not None:
        fields[ATTEMPT] = attempt
    if step is not None:
        fields[STEP] = step
    return fields


@contextlib.contextmanager
def correlated(
    *,
    order_id: str | None = None,
    instance_id: object | None = None,
    attempt: int | None = None,
    step: str | None = None,
) -> Iterator[None]:
    """Every record logged in this block (and in what it awaits) carries these ids."""
    ids = correlation(order_id=order_id, instance_id=instance_id, attempt=attempt, step=step)
    token = _context.set({**_context.get(), **ids})
    try:
        yield
    finally:
        _context.reset(token)


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, ".6g")
    if isinstance(value, datetime):
        return value.isoformat()
    text = "null" if value is None else str(value)
    if text and not _NEEDS_QUOTES.search(text):
        return text
    return f'"{_UNSAFE.sub(_escape, text)}"'


# A value a sender set (a message id, a reason) may hold anything: a line break or U+2028
# would start a forged log line, an ANSI escape would repaint a terminal, a bidirectional
# override would reorder what a reader sees. Each is written as a \uXXXX escape.
_CONTROLS = "\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
_UNSAFE = re.compile(f'[\\\\"{_CONTROLS}]')
_NEEDS_QUOTES = re.compile(f'[\\s=\\\\"{_CONTROLS}]')
_SHORT_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n"}


def _escape(match: re.Match[str]) -> str:
    character = match.group()
    return _SHORT_ESCAPES.get(character) or f"\\u{ord(character):04x}"


def render(event: str, fields: Mapping[str, object]) -> str:
    """``event k=v k=v``: the event, then each field; a value with a space, quote or ``=``
    is quoted."""
    parts = [event, *(f"{key}={_text(value)}" for key, value in fields.items())]
    return " ".join(parts)


class AppLogger:
    """A logger whose calls take the event and its fields as keywords (module docstring)."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def log(
        self,
        level: int,
        event: str,
        *,
        exc_info: bool = False,
        order_id: str | None = None,
        instance_id: object | None = None,
        attempt: int | None = None,
        step: str | None = None,
        **fields: object,
    ) -> None:
        if not self.logger.isEnabledFor(level):
            return
        ids = correlation(order_id=order_id, instance_id=instance_id, attempt=attempt, step=step)
        merged: dict[str, object] = {**_context.get(), **ids}
        merged.update(fields)
        extra: dict[str, Any] = {
            (key if key not in _RESERVED else f"sas.{key}"): value for key, value in merged.items()
        }
        extra[FIELDS_ATTRIBUTE] = tuple(extra)
        # No args: the message is never %-formatted, so a "%" in a value stays as it is.
        self.logger.log(level, render(event, merged), exc_info=exc_info, extra=extra, stacklevel=3)

    def debug(self, event: str, **fields: Any) -> None:
        self.log(logging.DEBUG, event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self.log(logging.INFO, event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self.log(logging.WARNING, event, **fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error with the exception being handled."""
        self.log(logging.ERROR, event, exc_info=True, **fields)


def get_logger(name: str) -> AppLogger:
    return AppLogger(logging.getLogger(name))
