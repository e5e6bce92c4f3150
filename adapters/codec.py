"""The one codec of the app's internal payloads (D6, E1, E3, C7): orchestration inputs,
activity inputs and results, agent requests and responses.

The payloads are the domain's frozen dataclasses; msgspec turns them into JSON data and
back, checking each field's type on the way in, so no class carries a hand-written
to_dict/from_dict. What does not fit raises `PayloadError`, whose message names the field
by its path and the expected type, never the value it got.
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
