"""Local services the devhost starts as child processes (the Cosmos DB API server, the broker):
reading their readiness lines with a bound, and stopping them."""

from __future__ import annotations

import subprocess
import threading

STOP_BOUND_SECONDS = 10.0


def first_lines(process: subprocess.Popen[str], count: int, bound: float) -> list[str]:
    """Up to ``count`` lines of the process's stdout, stripped; fewer if ``bound`` seconds
    pass or the output ends first."""
    lines: list[str] = []

    def read() -> None:
        while process.stdout is not None and len(lines) < count:
            line = process.stdout.readline()
            if not line:
                return
            lines.append(line.strip())

    # readline blocks, so it runs on a helper thread and the wait on it is bounded.
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(bound)
    return list(lines)


def stop(process: subprocess.Popen[str]) -> None:
    """Terminate, kill if it does not end within the bound, and close its pipes."""
    process.terminate()
    try:
        process.wait(STOP_BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_BOUND_SECONDS)
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()
