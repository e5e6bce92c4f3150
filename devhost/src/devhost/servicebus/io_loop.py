"""The broker's single-threaded IO loop: sockets <-> proton transports, timers, wake-ups.

Proton does all AMQP framing, SASL and state; this loop only moves bytes between non-blocking
sockets and proton transports, pops the shared event collector into the broker's handler, and
runs timers. It replaces proton's Python reactor (Container), whose generic selectable and handler
machinery costs more per message than the broker's own work (the broker's throughput goal,
README: 2,000 msgs/s). Other threads reach the loop only through call_threadsafe(), which wakes
it through a socket pair.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import itertools
import logging
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

from proton import Collector, Connection, ProtonException, Transport

logger = logging.getLogger(__name__)

READ_SIZE = 65536
_LISTENER = object()
_WAKE = object()


class TimerHandle:
    """A scheduled callback; cancel() keeps it from running."""

    __slots__ = ("callback", "cancelled", "deadline")

    def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Peer:
    """One accepted socket and the proton transport/connection it carries."""

    __slots__ = ("connection", "interest", "sock", "transport")

    def __init__(self, sock: socket.socket, transport: Any, connection: Any) -> None:
        self.sock = sock
        self.transport = transport
        self.connection = connection
        self.interest = selectors.EVENT_READ


class IoLoop:
    """Accepts AMQP connections on host:port and feeds their events to ``handler``."""

    def __init__(self, handler: Any, host: str, port: int, *, backlog: int = 128) -> None:
        self._handler = handler
        self._selector = selectors.DefaultSelector()
        self._collector = Collector()
        self._listener: socket.socket | None = socket.create_server(
            (host, port), backlog=backlog, reuse_port=False
        )
        self._listener.setblocking(False)
        self.port = int(self._listener.getsockname()[1])
        self._selector.register(self._listener, selectors.EVENT_READ, _LISTENER)
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self._selector.register(self._wake_reader, selectors.EVENT_READ, _WAKE)
        self._calls: collections.deque[Callable[[], None]] = collections.deque()
        self._timers: list[tuple[float, int, TimerHandle]] = []
        self._timer_order = itertools.count()
        self._peers: dict[int, _Peer] = {}
        self._stopped = False

    # -- API for other threads ----------------------------------------------------------------

    def call_threadsafe(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop's thread soon."""
        self._calls.append(callback)
        # BlockingIOError: a wake-up is already pending; OSError: the loop has finished
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_writer.send(b"\0")

    # -- API for the loop's thread ------------------------------------------------------------

    def schedule(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        handle = TimerHandle(time.monotonic() + delay, callback)
        heapq.heappush(self._timers, (handle.deadline, next(self._timer_order), handle))
        return handle

    def close_listener(self) -> None:
        if self._listener is not None:
            self._selector.unregister(self._listener)
            self._listener.close()
            self._listener = None

    def stop(self) -> None:
        """End run() after the current iteration; remaining sockets are closed."""
        self._stopped = True

    def run(self) -> None:
        try:
            while not self._stopped:
                for key, mask in self._selector.select(self._timeout()):
                    if key.data is _LISTENER:
                        self._accept()
                    elif key.data is _WAKE:
                        self._run_calls()
                    else:
                        if mask & selectors.EVENT_READ:
                            self._read(key.data)
                        if mask & selectors.EVENT_WRITE:
                            self._write(key.data)
                self._run_due_timers()
                self._dispatch()
                self._flush()
        finally:
            self._shut_down()

    # -- internals ----------------------------------------------------------------------------

    def _timeout(self) -> float | None:
        deadline: float | None = None
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        if self._timers:
            deadline = self._timers[0][0]
        now = time.monotonic()
        for peer in self._peers.values():
            # heartbeats and idle timeouts, when the client asked for them
            tick = peer.transport.tick(now)
            if tick and (deadline is None or tick < deadline):
                deadline = tick
        if self._calls:
            return 0
        return None if deadline is None else max(deadline - now, 0)

    def _accept(self) -> None:
        while self._listener is not None:
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                logger.warning("accept failed: %r", exc)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
            transport = Transport(Transport.SERVER)
            connection = Connection()
            connection.collect(self._collector)
            transport.bind(connection)
            peer = _Peer(sock, transport, connection)
            self._peers[sock.fileno()] = peer
            self._selector.register(sock, selectors.EVENT_READ, peer)

    def _run_calls(self) -> None:
        try:
            while self._wake_reader.recv(4096):
                pass
        except BlockingIOError:
            pass
        while self._calls:
            self._guard(self._calls.popleft())

    def _run_due_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, handle = heapq.heappop(self._timers)
            if not handle.cancelled:
                self._guard(handle.callback)

    def _guard(self, callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:
            logger.exception("a broker callback failed; the loop goes on")

    def _dispatch(self) -> None:
        collector = self._collector
        while True:
            event = collector.peek()
            if event is None:
                return
            try:
                event.dispatch(self._handler)
            except Exception:
                logger.exception("event=%s: handler failed; the loop goes on", event.type)
            finally:
                collector.pop()

    def _read(self, peer: _Peer) -> None:
        transport = peer.transport
        try:
            capacity = transport.capacity()
        except ProtonException:
            capacity = -1
        if capacity <= 0:
            return
        try:
            data = peer.sock.recv(min(capacity, READ_SIZE))
        except BlockingIOError:
            return
        except OSError:
            transport.close_tail()
            return
        if not data:
            transport.close_tail()
            return
        try:
            transport.push(data)
        except ProtonException:
            transport.close_tail()

    def _write(self, peer: _Peer) -> None:
        transport = peer.transport
        try:
            pending = transport.pending()
        except ProtonException:
            return
        if pending <= 0:
            return
        try:
            sent = peer.sock.send(transport.peek(pending))
        except BlockingIOError:
            return
        except OSError:
            transport.close_head()
            return
        transport.pop(sent)

    def _flush(self) -> None:
        """Write what the transports produced; retire peers whose transport has closed."""
        finished = []
        for peer in self._peers.values():
            self._write(peer)
            transport = peer.transport
            if transport.closed:
                finished.append(peer)
                continue
            try:
                reading = transport.capacity() > 0
            except ProtonException:
                reading = False
            try:
                writing = transport.pending() > 0
            except ProtonException:
                writing = False
            interest = (selectors.EVENT_READ if reading else 0) | (
                selectors.EVENT_WRITE if writing else 0
            )
            if interest != peer.interest:
                if peer.interest and interest:
                    self._selector.modify(peer.sock, interest, peer)
                elif interest:
                    self._selector.register(peer.sock, interest, peer)
                else:
                    self._selector.unregister(peer.sock)
                peer.interest = interest
        if finished:
            self._dispatch()  # the handler sees transport-closed while the connection is bound
        for peer in finished:
            self._retire(peer)

    def _retire(self, peer: _Peer) -> None:
        del self._peers[peer.sock.fileno()]
        if peer.interest:
            self._selector.unregister(peer.sock)
        peer.sock.close()
        peer.transport.unbind()

    def _shut_down(self) -> None:
        for peer in self._peers.values():
            peer.transport.close_tail()
            peer.transport.close_head()
        self._dispatch()
        for peer in list(self._peers.values()):
            self._retire(peer)
        self.close_listener()
        self._selector.close()
        self._wake_reader.close()
        self._wake_writer.close()
