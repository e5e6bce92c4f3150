"""The embedded Service Bus broker as a component: start, stop, serve in the foreground.

One background thread runs the IO loop and owns the queue model and every proton object. Other
threads reach it only through IoLoop.call_threadsafe (stop, active_counts), never by touching
proton objects or queues.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import types

from devhost.servicebus.broker_handler import BrokerHandler
from devhost.servicebus.config import BrokerConfig
from devhost.servicebus.entities import Namespace, wall_clock_ms
from devhost.servicebus.io_loop import IoLoop
from devhost.servicebus.journal import SqliteJournal

logger = logging.getLogger(__name__)

STOP_TIMEOUT_SECONDS = 10.0
COUNTS_TIMEOUT_SECONDS = 10.0
LISTEN_BACKLOG = 128


class BrokerError(RuntimeError):
    """The broker could not start or stopped abnormally."""


class ServiceBusBroker:
    """A Service Bus-compatible AMQP endpoint that the azure-servicebus SDK connects to.

    ``port=0`` picks a free port (see :attr:`port`). With ``data_path``, accepted messages are
    journaled to that SQLite file and recovered on the next start.
    """

    def __init__(
        self,
        config: BrokerConfig,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        data_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self._config = config
        self._host = host
        self._requested_port = port
        self._data_path = data_path
        self._port: int | None = None
        self._handler: BrokerHandler | None = None
        self._loop: IoLoop | None = None
        self._namespace: Namespace | None = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        if self._port is None:
            raise BrokerError("the broker has not been started: call start() first")
        return self._port

    @property
    def host(self) -> str:
        return self._host

    @property
    def connection_string(self) -> str:
        return (
            f"Endpoint=sb://{self._host}:{self.port};SharedAccessKeyName=local;"
            "SharedAccessKey=local;UseDevelopmentEmulator=true"
        )

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Bind, then run the IO loop on a background thread; raises if the port is unusable."""
        with self._lock:
            if self._thread is not None:
                raise BrokerError("the broker is already started; create a new one to restart")
            journal = SqliteJournal(self._data_path) if self._data_path is not None else None
            namespace = Namespace(self._config, journal=journal)
            handler = BrokerHandler(namespace, clock=wall_clock_ms)
            try:
                loop = IoLoop(handler, self._host, self._requested_port, backlog=LISTEN_BACKLOG)
            except OSError as exc:
                namespace.close()
                raise BrokerError(
                    f"cannot listen on {self._host}:{self._requested_port}: {exc}; "
                    "pick another --port (0 chooses a free one)"
                ) from exc
            self._port = loop.port
            self._handler = handler
            self._loop = loop
            self._namespace = namespace
            self._thread = threading.Thread(
                target=self._run,
                args=(loop, handler, namespace),
                name="servicebus-broker",
                daemon=True,
            )
            self._thread.start()
            logger.info("servicebus broker listening on %s:%s", self._host, self._port)

    def _run(self, loop: IoLoop, handler: BrokerHandler, namespace: Namespace) -> None:
        try:
            handler.start(loop)
            loop.run()
        except BaseException as exc:
            self._failure = exc
            logger.exception("the servicebus broker's IO loop stopped")
        finally:
            namespace.close()

    def stop(self) -> None:
        """Close every connection and the journal; idempotent."""
        with self._lock:
            thread, loop, handler = self._thread, self._loop, self._handler
            if thread is None or loop is None or handler is None or not thread.is_alive():
                return
            loop.call_threadsafe(handler.stop)
            thread.join(STOP_TIMEOUT_SECONDS)
            if thread.is_alive():
                raise BrokerError(
                    f"the broker did not stop within {STOP_TIMEOUT_SECONDS:.0f} s; "
                    "its IO loop thread is still running"
                )

    def active_counts(self, timeout: float = COUNTS_TIMEOUT_SECONDS) -> dict[str, int]:
        """Messages available to receive now in each queue (not locked, scheduled, deferred
        or dead-lettered), read on the IO loop's thread: what a management client reads as
        a queue's active message count."""
        loop, namespace = self._loop, self._namespace
        if loop is None or namespace is None or not self.running:
            raise BrokerError("the broker is not running")
        counts: dict[str, int] = {}
        done = threading.Event()

        def count() -> None:
            try:
                counts.update({queue.name: queue.active_count() for queue in namespace.queues()})
            finally:
                done.set()

        loop.call_threadsafe(count)
        if not done.wait(timeout):
            raise BrokerError(f"the broker did not count its queues within {timeout:.0f} s")
        return counts

    def serve_forever(self) -> None:
        """Run until SIGINT or SIGTERM, then stop cleanly (call from the main thread)."""
        if self._thread is None:
            self.start()
        stop_requested = threading.Event()

        def request_stop(signum: int, frame: types.FrameType | None) -> None:
            stop_requested.set()

        previous = {
            sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            while not stop_requested.wait(0.5):
                if not self.running:
                    raise BrokerError(f"the broker stopped unexpectedly: {self._failure!r}")
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stop()

    def __enter__(self) -> ServiceBusBroker:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
