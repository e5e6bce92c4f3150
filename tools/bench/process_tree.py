"""What a benchmarked command's process tree used: peak memory and CPU, by process role.

A demo run is one process tree: the demo process (the devhost's host, its Durable engine and
the simulated services) and its children, the language worker that runs the app, the
embedded Service Bus broker, the client app and, with the Cosmos DB backend, the local Cosmos
DB API server. `wait_with_usage` samples the tree from /proc every half second while it runs
and reaps the root with `os.wait4`; `TreeUsage.cpu_seconds_by_role` credits the CPU each
process used within a window of the run to its role (`role_of`), so a benchmark can say
which part of the pipeline a cost falls on, without the start-up and shutdown around the
part it measures. Linux only.
"""

from __future__ import annotations

import bisect
import os
import subprocess
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

POLL_SECONDS = 0.5
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

ROOT_ROLE = "demo: host, Durable engine, simulated services"
# The first entry whose text the command line holds names a child's role.
ROLES = (
    ("devhost.language_worker", "language worker: the app"),
    ("servicebus", "Service Bus broker"),
    ("tools.demo.client_process", "client app"),
    ("node", "Cosmos DB server"),
)
OTHER_ROLE = "other"


@dataclass(frozen=True)
class TreeSample:
    """The CPU ticks of each process of the tree at one moment (``time.monotonic()``)."""

    at: float
    ticks: dict[int, int]


@dataclass(frozen=True)
class TreeUsage:
    """What a process tree used over its run."""

    peak_rss_kb: int
    cpu_seconds: float
    samples: tuple[TreeSample, ...]
    roles: dict[int, str]
    """The role of each process ever sampled."""

    def cpu_seconds_by_role(self, start: float, end: float) -> dict[str, float]:
        """Each role's CPU seconds from `start` to `end` (``time.monotonic()``, the clock of
        every process on the machine). A process's CPU at a moment is interpolated between
        the samples around it; before its first sample it counts its first, after its last
        its last (a half second of each end may be missing)."""
        series: defaultdict[int, list[tuple[float, int]]] = defaultdict(list)
        for sample in self.samples:
            for pid, ticks in sample.ticks.items():
                series[pid].append((sample.at, ticks))
        by_role: defaultdict[str, float] = defaultdict(float)
        for pid, points in series.items():
            used = _ticks_at(points, end) - _ticks_at(points, start)
            by_role[self.roles.get(pid, OTHER_ROLE)] += used / CLOCK_TICKS
        return dict(by_role)


def _ticks_at(points: list[tuple[float, int]], moment: float) -> float:
    after = bisect.bisect_left(points, moment, key=lambda point: point[0])
    if after == 0:
        return points[0][1]
    if after == len(points):
        return points[-1][1]
    (t0, v0), (t1, v1) = points[after - 1], points[after]
    return v0 + (v1 - v0) * (moment - t0) / (t1 - t0)


def role_of(command_line: str) -> str:
    """The role of a child process of the demo, from its command line."""
    return next((role for text, role in ROLES if text in command_line), OTHER_ROLE)


def wait_with_usage(process: subprocess.Popen[bytes], bound: float) -> tuple[int | None, TreeUsage]:
    """Reap the process with wait4; its exit code and what its process tree used.

    The peak RSS is the largest sum over the tree at a sample; the CPU time, the larger of
    what the kernel counted for the process and the children it reaped (`os.wait4`) and the
    sum of each process's last sampled CPU time. Returns None for the exit code when the
    bound passed and the process had to be killed.
    """
    deadline = time.monotonic() + bound
    timed_out = False
    peak_tree_kb = 0
    roles: dict[int, str] = {}
    samples: list[TreeSample] = []
    try:
        while True:
            tree = sample_tree(process.pid)
            samples.append(TreeSample(time.monotonic(), {p: t for p, (_, t) in tree.items()}))
            peak_tree_kb = max(peak_tree_kb, sum(rss for rss, _ in tree.values()))
            for pid in tree:
                # A child caught between fork and exec shows its parent's command line: it
                # is named again at each sample until its own names a role.
                if roles.get(pid, OTHER_ROLE) == OTHER_ROLE:
                    roles[pid] = ROOT_ROLE if pid == process.pid else role_of(_command_line(pid))
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid == process.pid:
                exit_code = os.waitstatus_to_exitcode(status)
                # Reaped here, not by Popen: tell Popen so it does not wait for it again.
                process.returncode = exit_code
                reaped = usage.ru_utime + usage.ru_stime
                last_ticks = {pid: t for sample in samples for pid, t in sample.ticks.items()}
                sampled = sum(last_ticks.values()) / CLOCK_TICKS
                return (None if timed_out else exit_code), TreeUsage(
                    max(peak_tree_kb, usage.ru_maxrss),
                    max(reaped, sampled),
                    tuple(samples),
                    roles,
                )
            if not timed_out and time.monotonic() > deadline:
                process.kill()
                timed_out = True
            time.sleep(POLL_SECONDS)
    except BaseException:
        if process.returncode is None:
            process.kill()
            process.wait()
        raise


def sample_tree(root: int) -> dict[int, tuple[int, int]]:
    """``root`` and all its descendants now: pid -> (resident KiB, CPU ticks) (Linux /proc)."""
    parent_of: dict[int, int] = {}
    usage: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text(encoding="ascii", errors="replace")
            statm = Path(entry.path, "statm").read_text(encoding="ascii")
        except OSError:
            continue  # the process ended while being read
        pid = int(entry.name)
        # The command name may hold spaces and parentheses: the fields after the last ')',
        # from the state (field 3): ppid is field 4, utime and stime fields 14 and 15.
        fields = stat.rsplit(")", 1)[1].split()
        parent_of[pid] = int(fields[1])
        usage[pid] = (int(statm.split()[1]) * PAGE_KB, int(fields[11]) + int(fields[12]))
    tree = {root}
    grew = True
    while grew:
        children = {pid for pid, parent in parent_of.items() if parent in tree} - tree
        tree |= children
        grew = bool(children)
    return {pid: usage[pid] for pid in tree if pid in usage}


def _command_line(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""  # it ended before it was named: its CPU is counted as "other"
