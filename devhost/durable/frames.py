"""The frames between the devhost and its replay workers: a 4-byte big-endian length, then JSON."""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

FRAME_HEADER = struct.Struct(">I")


def encode_frame(document: dict[str, Any]) -> bytes:
    payload = json.dumps(document).encode("utf-8")
    return FRAME_HEADER.pack(len(payload)) + payload


def read_frame(stream: BinaryIO) -> dict[str, Any] | None:
    """The next frame of a blocking stream, or None at its end."""
    header = stream.read(FRAME_HEADER.size)
    if len(header) < FRAME_HEADER.size:
        return None
    (length,) = FRAME_HEADER.unpack(header)
    document: dict[str, Any] = json.loads(stream.read(length))
    return document
