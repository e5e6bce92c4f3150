"""The chaos run's child processes, each killable with SIGKILL and restartable on the same
ports and files: the devhost (``python -m devhost start``, with its language workers, in a
process group of its own) and the simulated services (``python -m tools.simulators.services`` with
their ``--ledger`` journal, so idempotency, fences and the evidence survive a kill: E7, C8).
The broker is `devhost.servicebus.process.BrokerProcess` with its ``--data`` journal.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from devhost import child_process

from tools.simulators.services import SERVICES, FaultPlan
from tools.simulators.services.declarations import declaration

READY_BOUND_SECONDS = 60.0
HTTP_TIMEOUT_SECONDS = 10.0
LOOPBACK = "127.0.0.1"


class HostProcess:
    """``python -m devhost start`` on the app, its settings in the environment.

    The child leads a new session, so ``kill`` (SIGKILL to the process group) ends the host
    and its language workers together, as a crashed machine would; ``start`` brings it back
    on the same data directory (histories, timers) and the same stores (C10).
    """

    def __init__(
        self,
        app_root: Path,
        data_dir: Path,
        settings: Mapping[str, str],
        log: TextIO,
        *,
        worker_processes: int = 1,
    ) -> None:
        self._app_root = app_root
        self._data_dir = data_dir
        self._settings = dict(settings)
        self._log = log
        self._worker_processes = worker_processes
        self._process: subprocess.Popen[str] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        if self._process is not None:
            raise RuntimeError("the devhost process is already running")
        self._process = subprocess.Popen(
            [
                *(sys.executable, "-m", "devhost", "--log-level", "WARNING", "start"),
                *("--app-root", str(self._app_root), "--data", str(self._data_dir)),
                *("--http-port", "0", "--worker-processes", str(self._worker_processes)),
            ],
            cwd=self._app_root,
            env={**os.environ, **self._settings, "PYTHONPATH": str(self._app_root)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            start_new_session=True,
        )
        lines = child_process.first_lines(self._process, 1, READY_BOUND_SECONDS)
        if not lines or not lines[0].startswith("devhost ready"):
            code = self._process.poll()
            _drain(self._process)
            self.kill()
            raise RuntimeError(
                f"the devhost did not report readiness within {READY_BOUND_SECONDS:.0f}s "
                f"(exit code {code}; it said {lines!r}; its log: {self._log.name})"
            )
        _drain(self._process)

    def kill(self) -> None:
        """SIGKILL to the host's whole process group (host and language workers)."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(child_process.STOP_BOUND_SECONDS)

    def stop(self) -> None:
        """SIGTERM (the host stops its workers and listeners), SIGKILL past the bound."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(child_process.STOP_BOUND_SECONDS * 3)
        except subprocess.TimeoutExpired:
            self._process = process
            self.kill()
            return
        # Workers the host could not stop must not outlive the run.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


class ServicesProcess:
    """``python -m tools.simulators.services`` with a ledger journal and a fault plan per service.

    ``port`` 0 picks a free port on the first start; a start after ``kill`` reuses it, reads
    the journal back and is given the same fault plans (``PUT {prefix}/faults``).
    """

    def __init__(
        self, ledger: Path, plans: Mapping[str, FaultPlan], seed: int, log: TextIO
    ) -> None:
        self.ledger = ledger
        self._plans = dict(plans)
        self._seed = seed
        self._log = log
        self._port = 0
        self._process: subprocess.Popen[str] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self._port}"

    def url(self, service: str) -> str:
        return f"{self.base_url}{declaration(service).path_prefix}"

    def start(self) -> None:
        if self._process is not None:
            raise RuntimeError("the services process is already running")
        self._process = subprocess.Popen(
            [
                *(sys.executable, "-m", "tools.simulators.services", "--port", str(self._port)),
                *("--seed", str(self._seed), "--ledger", str(self.ledger)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        lines = child_process.first_lines(self._process, 1, READY_BOUND_SECONDS)
        if not lines or not lines[0].startswith("listening on "):
            code = self._process.poll()
            _drain(self._process)
            self.kill()
            raise RuntimeError(
                f"the simulated services did not start (exit code {code}; said {lines!r})"
            )
        self._port = int(lines[0].rsplit(":", 1)[1])
        _drain(self._process)
        for service, plan in self._plans.items():
            _request("PUT", f"{self.url(service)}/faults", plan.to_json())

    def stats(self) -> dict[str, dict[str, Any]]:
        """Every service's ``GET /stats`` (its counters restart with the process)."""
        return {service: _request("GET", f"{self.url(service)}/stats") for service in SERVICES}

    def kill(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.kill()
        process.wait(child_process.STOP_BOUND_SECONDS)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            child_process.stop(process)


def _drain(process: subprocess.Popen[str]) -> None:
    """Read what the child (or a language worker it started) writes on stdout after its
    readiness line, so that a full pipe never blocks it; close the pipe at its end (only
    here: closing it while this thread reads would wait on the reader's lock)."""
    stream = process.stdout
    if stream is None:
        return

    def read() -> None:
        with contextlib.suppress(OSError, ValueError):
            for _ in stream:
                pass
            stream.close()

    threading.Thread(target=read, daemon=True).start()


def _request(method: str, url: str, document: object | None = None) -> dict[str, Any]:
    data = None if document is None else json.dumps(document).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer
