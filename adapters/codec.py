"""The one codec of the app's internal payloads (D6, E1, E3, C7): orchestration and activity
inputs and results, agent requests and responses.

`to_data`/`from_data` (Durable Functions' JSON data) and `to_json`/`from_json` (message
bodies) over the domain's frozen dataclasses, type-checked on the way in. What does not fit
raises `PayloadError`, naming the field's path and expected type, never the value.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T")


class PayloadError(ValueError):
    """A payload that is not JSON or does not have the shape of its type."""


def to_data(value: object) -> Any:
    """`value` as JSON data (dicts, lists, strings, numbers), as Durable Functions carries it."""
    return msgspec.to_builtins(value)


def from_data(data: object, kind: type[T]) -> T:
    """The `kind` value that `to_data` made `data` from."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as error:
        raise PayloadError(f"{kind.__name__}: {error}") from None


def to_json(value: object) -> str:
    """`value` as a JSON message body."""
    return msgspec.json.encode(value).decode("utf-8")


def from_json(body: bytes | str, kind: type[T]) -> T:
    """The `kind` value of a JSON message body."""
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as error:
        raise PayloadError(f"{kind.__name__}: {error}") from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
        raise PayloadError(
            f"{kind.__name__}: the body is not JSON ({type(error).__name__})"
        ) from None
