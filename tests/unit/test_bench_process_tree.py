"""The benchmark's CPU accounting: each process's CPU within the measured part of a run, by
the role its command line names (bench.process_tree)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tools.bench.process_tree import (
    CLOCK_TICKS,
    OTHER_ROLE,
    ROOT_ROLE,
    TreeSample,
    TreeUsage,
    role_of,
    wait_with_usage,
)

WORKER = "language worker: the app"
BROKER = "Service Bus broker"


def usage_of(samples: list[tuple[float, dict[int, int]]], roles: dict[int, str]) -> TreeUsage:
    return TreeUsage(
        peak_rss_kb=0,
        cpu_seconds=0.0,
        samples=tuple(TreeSample(at, ticks) for at, ticks in samples),
        roles=roles,
    )


def test_the_demo_processes_are_named_by_their_command_lines() -> None:
    python = "/venv/bin/python"
    assert role_of(f"{python} -m devhost.language_worker function_app:app /app --host 1") == WORKER
    assert role_of(f"{python} -m devhost --log-level ERROR servicebus --port 0") == BROKER
    assert role_of(f"{python} -m tools.demo.client_process") == "client app"
    assert role_of("/usr/bin/node /app/node_modules/cosmos/server.js") == "Cosmos DB server"
    assert role_of("/bin/sh -c true") == OTHER_ROLE


def test_only_the_cpu_used_inside_the_window_counts() -> None:
    # The worker burns one tick per second throughout; the broker only before the window.
    ticks = CLOCK_TICKS
    samples = [
        (10.0, {1: 0, 2: 0}),
        (11.0, {1: ticks, 2: 5 * ticks}),
        (12.0, {1: 2 * ticks, 2: 5 * ticks}),
        (13.0, {1: 3 * ticks, 2: 5 * ticks}),
    ]
    usage = usage_of(samples, {1: WORKER, 2: BROKER})

    within = usage.cpu_seconds_by_role(11.0, 13.0)
    assert within[WORKER] == pytest.approx(2.0)
    assert within[BROKER] == pytest.approx(0.0)

    # Between samples a process's CPU is interpolated.
    assert usage.cpu_seconds_by_role(10.5, 11.5)[WORKER] == pytest.approx(1.0)
    # Before the first sample and after the last the end values hold: nothing is invented.
    assert usage.cpu_seconds_by_role(0.0, 100.0) == pytest.approx({WORKER: 3.0, BROKER: 5.0})


def test_processes_of_one_role_add_up_and_an_unnamed_one_is_other() -> None:
    ticks = CLOCK_TICKS
    samples = [(0.0, {1: 0, 2: 0, 3: 0}), (1.0, {1: ticks, 2: 2 * ticks, 3: 4 * ticks})]
    usage = usage_of(samples, {1: WORKER, 2: WORKER})

    assert usage.cpu_seconds_by_role(0.0, 1.0) == pytest.approx({WORKER: 3.0, OTHER_ROLE: 4.0})


def test_a_real_process_tree_is_sampled_and_its_busy_window_found() -> None:
    # A root that idles, then burns CPU for a while, then idles again: its CPU within the busy
    # window is most of what it used.
    script = (
        "import time\n"
        "time.sleep(1.0)\n"
        "print(time.monotonic(), flush=True)\n"
        "end = time.monotonic() + 1.5\n"
        "while time.monotonic() < end: pass\n"
        "print(time.monotonic(), flush=True)\n"
        "time.sleep(1.0)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    started = time.monotonic()
    exit_code, usage = wait_with_usage(process, bound=30.0)
    assert exit_code == 0
    assert process.stdout is not None
    start, end = (float(line) for line in process.stdout.read().split())
    process.stdout.close()

    busy = usage.cpu_seconds_by_role(start, end)
    assert set(busy) == {ROOT_ROLE}
    # One core's worth of the busy 1.5 s, allowing for a half second of sampling at each end
    # and a shared machine; the idle seconds around it add next to nothing.
    assert 0.4 <= busy[ROOT_ROLE] <= 1.6
    assert usage.cpu_seconds >= busy[ROOT_ROLE] - 0.01
    assert usage.samples[0].at >= started


def test_a_child_seen_between_fork_and_exec_is_named_after_its_exec() -> None:
    # The child shows the root's command line for about a second (two samples or more), then
    # execs a client app: its role is the client app's, not "other" for the whole run.
    script = (
        "import os, sys, time\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    time.sleep(1.2)\n"
        "    program = [sys.executable, '-c', 'import time; time.sleep(1.2)']\n"
        "    os.execv(sys.executable, program + ['tools.demo.' + 'client_process'])\n"
        "print(child, flush=True)\n"
        "os.waitpid(child, 0)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    exit_code, usage = wait_with_usage(process, bound=30.0)
    assert exit_code == 0
    assert process.stdout is not None
    child = int(process.stdout.read())
    process.stdout.close()

    assert usage.roles[process.pid] == ROOT_ROLE
    assert usage.roles[child] == "client app"
