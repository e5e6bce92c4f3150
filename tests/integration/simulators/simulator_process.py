"""The simulators' command as a child process, for the runner tests."""

import asyncio
import signal
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
PROCESS_BOUND_SECONDS = 30


class SimulatorProcess:
    """``python -m tools.simulators.services --port 0 ...`` as a child process, with its
    announced address."""

    def __init__(self, process: asyncio.subprocess.Process, base_url: str) -> None:
        self.process = process
        self.base_url = base_url

    @classmethod
    async def start(cls, *arguments: str) -> "SimulatorProcess":
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tools.simulators.services",
            "--port",
            "0",
            *arguments,
            cwd=REPO_ROOT,
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), PROCESS_BOUND_SECONDS)
        announced = line.decode().strip()
        assert announced.startswith("listening on 127.0.0.1:"), announced
        return cls(process, f"http://{announced.removeprefix('listening on ')}")

    async def end(self, signum: signal.Signals) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signum)
        return await asyncio.wait_for(self.process.wait(), PROCESS_BOUND_SECONDS)
