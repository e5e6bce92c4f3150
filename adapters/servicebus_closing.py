"""Closing the app's Service Bus senders, receivers and clients, bounded.

Closing a link or a connection whose peer died may wait for frames that never come, or
raise; either way the handler is done with, and a shutdown must not wait on it (a host
stopping, or a test tearing down, would hang there).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from observability import logs

CLOSE_TIMEOUT_SECONDS = 5.0

log = logs.get_logger("app.servicebus")


class Closable(Protocol):
    async def close(self) -> None: ...


async def close_quietly(handler: Closable, what: str) -> None:
    """Close `handler` (`what` names it in the debug log), giving up after a few seconds."""
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
            await handler.close()
    except Exception as error:
        log.debug(
            "closing a service bus handler",
            handler=what,
            error=type(error).__name__,
            detail=str(error),
        )
