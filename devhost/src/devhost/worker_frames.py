"""The frames between the devhost and its language workers: a 4-byte big-endian length, then a
pickle. Both ends are the devhost's own code on a private pipe to its own child process, so
pickle carries the episode dataclasses as they are; nothing else ever writes to that pipe.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, BinaryIO

FRAME_HEADER = struct.Struct(">I")


def encode_frame(value: Any) -> bytes:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return FRAME_HEADER.pack(len(payload)) + payload


def decode_payload(payload: bytes) -> Any:
    return pickle.loads(payload)


def read_frame(stream: BinaryIO) -> Any | None:
    """The next frame of a blocking stream, or None at its end."""
    header = stream.read(FRAME_HEADER.size)
    if len(header) < FRAME_HEADER.size:
        return None
    (length,) = FRAME_HEADER.unpack(header)
    return decode_payload(stream.read(length))
