"""Benchmark: the order pipeline's throughput, latency, cost and memory as load grows (issue 4).

Runs the fault-free pipeline (`python -m devhost demo --faults none`) at each size (default
1,000 and 5,000 orders), several runs per size, every run in its own subprocess. Its peak RSS
is the largest total resident memory of that process and its descendants (the language worker
and the broker run as child processes), sampled from /proc every half second, and never less
than what the kernel recorded for the demo process itself (`os.wait4`).
From each run's JSON report it takes orders/s (orders / duration_seconds: first submission
to last order finished), p50/p95 end-to-end latency and the store reads, store writes and
Service Bus messages per order, and prints the medians per size, the scaling ratio
throughput(largest) / throughput(smallest) (goal >= 0.9) and whether 100 orders/s is met.

    python -m bench.pipeline_throughput [--sizes 1000,5000] [--runs 3] [--seed 1]
                                        [--backend sqlite|cosmos] [--settle-seconds 120]

The stores are the embedded SQLite ones unless `--backend cosmos` (then the demo starts a
local Cosmos DB API server, a Node child process whose memory the peak RSS includes).

Every run must be correct before its speed counts: the benchmark stops with exit code 1 as
soon as a run's report has a lost or stuck order or a side effect performed twice, or the
demo fails. Not a test: not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.figures import REPO_ROOT, Spread, machine, markdown_table, verdict

THROUGHPUT_GOAL = 100.0
SCALING_GOAL = 0.9
# A run slower than this has hung rather than been slow; the bound adds the demo's settle time.
SLOWEST_CREDIBLE_ORDERS_PER_SECOND = 2.0
STARTUP_ALLOWANCE_SECONDS = 120.0
DEMO_SETTLE_SECONDS = 120.0  # the demo's own --settle-seconds default
POLL_SECONDS = 0.5
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
LOG_TAIL_CHARS = 3_000


class BenchError(RuntimeError):
    """A run failed or was incorrect; the message says which size and run, and what went wrong."""


@dataclass(frozen=True)
class PipelineRun:
    orders: int
    orders_per_second: float
    p50_ms: float
    p95_ms: float
    store_reads: float
    store_writes: float
    messages: float
    peak_rss_mb: float


@dataclass(frozen=True)
class SizeSummary:
    orders: int
    throughput: Spread
    p50_ms: float
    p95_ms: float
    store_reads: float
    store_writes: float
    messages: float
    peak_rss_mb: float

    @classmethod
    def of(cls, runs: Sequence[PipelineRun]) -> SizeSummary:
        def median(values: Sequence[float]) -> float:
            return Spread.of(values).median

        return cls(
            orders=runs[0].orders,
            throughput=Spread.of([run.orders_per_second for run in runs]),
            p50_ms=median([run.p50_ms for run in runs]),
            p95_ms=median([run.p95_ms for run in runs]),
            store_reads=median([run.store_reads for run in runs]),
            store_writes=median([run.store_writes for run in runs]),
            messages=median([run.messages for run in runs]),
            peak_rss_mb=max(run.peak_rss_mb for run in runs),
        )


@dataclass(frozen=True)
class DemoSettings:
    """What every run of the demo gets, whatever its size."""

    seed: int
    backend: str
    settle_seconds: float | None


def demo_command(orders: int, settings: DemoSettings, report: Path) -> list[str]:
    command = [sys.executable, "-m", "devhost", "demo", "--orders", str(orders), "--faults", "none"]
    command += ["--seed", str(settings.seed), "--backend", settings.backend]
    command += ["--report", str(report), "--no-progress"]
    if settings.settle_seconds is not None:
        command += ["--settle-seconds", str(settings.settle_seconds)]
    return command


def run_once(orders: int, settings: DemoSettings, label: str) -> PipelineRun:
    """One demo run in its own process; its report and the process's peak RSS."""
    settle_seconds = settings.settle_seconds
    bound = (
        STARTUP_ALLOWANCE_SECONDS
        + (settle_seconds if settle_seconds is not None else DEMO_SETTLE_SECONDS)
        + orders / SLOWEST_CREDIBLE_ORDERS_PER_SECOND
    )
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as work_dir:
        report_path = Path(work_dir) / "report.json"
        log_path = Path(work_dir) / "demo.log"
        with log_path.open("w", encoding="utf-8") as log:
            process = subprocess.Popen(
                demo_command(orders, settings, report_path),
                cwd=REPO_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            exit_code, peak_rss_kb = _wait_with_rusage(process, bound)
        if exit_code is None:
            raise BenchError(f"{label}: the demo did not finish within {bound:.0f} s; killed it")
        if not report_path.exists():
            raise BenchError(
                f"{label}: the demo exited with code {exit_code} and wrote no report; "
                f"its output ends with:\n{_tail(log_path)}"
            )
        report = json.loads(report_path.read_text(encoding="utf-8"))
        _check_correct(report, label, log_path)
        if exit_code != 0:
            raise BenchError(f"{label}: the demo exited with code {exit_code}:\n{_tail(log_path)}")
    return _run_from_report(report, peak_rss_kb)


def _wait_with_rusage(process: subprocess.Popen[bytes], bound: float) -> tuple[int | None, int]:
    """Reap the process with wait4; its exit code and the peak RSS of its process tree (KiB).

    Returns None for the exit code when the bound passed and the process had to be killed.
    """
    deadline = time.monotonic() + bound
    timed_out = False
    peak_tree_kb = 0
    try:
        while True:
            peak_tree_kb = max(peak_tree_kb, tree_rss_kb(process.pid))
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid == process.pid:
                exit_code = os.waitstatus_to_exitcode(status)
                # Reaped here, not by Popen: tell Popen so it does not wait for it again.
                process.returncode = exit_code
                return (None if timed_out else exit_code), max(peak_tree_kb, usage.ru_maxrss)
            if not timed_out and time.monotonic() > deadline:
                process.kill()
                timed_out = True
            time.sleep(POLL_SECONDS)
    except BaseException:
        if process.returncode is None:
            process.kill()
            process.wait()
        raise


def tree_rss_kb(root: int) -> int:
    """The resident memory of ``root`` and all its descendants now, in KiB (Linux /proc)."""
    parent_of: dict[int, int] = {}
    rss_kb: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text(encoding="ascii", errors="replace")
            statm = Path(entry.path, "statm").read_text(encoding="ascii")
        except OSError:
            continue  # the process ended while being read
        pid = int(entry.name)
        # The command name may hold spaces and parentheses: the fields after the last ')'.
        parent_of[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        rss_kb[pid] = int(statm.split()[1]) * PAGE_KB
    tree = {root}
    grew = True
    while grew:
        children = {pid for pid, parent in parent_of.items() if parent in tree} - tree
        tree |= children
        grew = bool(children)
    return sum(rss_kb.get(pid, 0) for pid in tree)


def _check_correct(report: dict[str, Any], label: str, log_path: Path) -> None:
    problems = {
        "lost orders": int(report["lost"]),
        "stuck orders": int(report["stuck"]),
        "double side effects": int(report["double_side_effects"]),
    }
    found = ", ".join(f"{count} {what}" for what, count in problems.items() if count)
    if found:
        examples = (report.get("lost_orders") or []) + (report.get("stuck_orders") or [])
        raise BenchError(
            f"{label}: the pipeline was incorrect: {found} (e.g. {examples[:5]}); "
            f"its output ends with:\n{_tail(log_path)}"
        )


def _run_from_report(report: dict[str, Any], peak_rss_kb: int) -> PipelineRun:
    latency = report["latency_ms"]
    per_order = report["per_order"]
    return PipelineRun(
        orders=int(report["orders"]),
        orders_per_second=report["orders"] / report["duration_seconds"],
        p50_ms=float(latency["p50"]),
        p95_ms=float(latency["p95"]),
        store_reads=float(per_order["store_reads"]),
        store_writes=float(per_order["store_writes"]),
        messages=float(per_order["messages"]),
        peak_rss_mb=peak_rss_kb / 1024,
    )


def _tail(log_path: Path) -> str:
    return log_path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pipeline_throughput",
        description="Throughput, latency, cost per order and peak RSS of the fault-free pipeline.",
    )
    parser.add_argument(
        "--sizes", default="1000,5000", help="comma-separated order counts, one size per set"
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per size")
    parser.add_argument("--seed", type=int, default=1, help="workload seed, the same every run")
    parser.add_argument(
        "--backend",
        choices=("sqlite", "cosmos"),
        default="sqlite",
        help="passed to the demo: the stores' backend (cosmos starts a local Cosmos DB API server)",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=None,
        help="passed to the demo: wait after the last submission (demo default: 120)",
    )
    args = parser.parse_args(argv)
    try:
        args.sizes = sorted({int(size) for size in args.sizes.split(",")})
    except ValueError:
        parser.error(f"--sizes must be comma-separated order counts, got {args.sizes!r}")
    if args.runs < 1 or min(args.sizes) < 1:
        parser.error("--runs and every size must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(
        f"Order pipeline, faults none: sizes {', '.join(f'{s:,}' for s in args.sizes)}, "
        f"runs per size: {args.runs}, seed {args.seed}, stores {args.backend}; {machine()}",
        flush=True,
    )
    settings = DemoSettings(args.seed, args.backend, args.settle_seconds)
    summaries: list[SizeSummary] = []
    try:
        for orders in args.sizes:
            runs: list[PipelineRun] = []
            for run in range(1, args.runs + 1):
                label = f"{orders:,} orders, run {run}/{args.runs}"
                result = run_once(orders, settings, label)
                runs.append(result)
                print(
                    f"  {label}: {result.orders_per_second:.1f} orders/s, "
                    f"p50 {result.p50_ms:,.0f} ms, p95 {result.p95_ms:,.0f} ms, "
                    f"peak RSS {result.peak_rss_mb:,.0f} MB",
                    flush=True,
                )
            summaries.append(SizeSummary.of(runs))
    except BenchError as exc:
        print(f"pipeline benchmark failed: {exc}", file=sys.stderr)
        return 1
    print()
    print(summary(summaries))
    return 0


def summary(summaries: Sequence[SizeSummary]) -> str:
    rows = [
        [
            f"{size.orders:,}",
            str(size.throughput.runs),
            f"{size.throughput.median:.1f}",
            f"{size.throughput.low:.1f}-{size.throughput.high:.1f}",
            f"{size.p50_ms:,.0f}",
            f"{size.p95_ms:,.0f}",
            f"{size.store_reads:.2f}",
            f"{size.store_writes:.2f}",
            f"{size.messages:.2f}",
            f"{size.peak_rss_mb:,.0f}",
            verdict(size.throughput.median >= THROUGHPUT_GOAL),
        ]
        for size in summaries
    ]
    headers = [
        "orders",
        "runs",
        "median orders/s",
        "min-max",
        "p50 ms",
        "p95 ms",
        "reads/order",
        "writes/order",
        "messages/order",
        "peak RSS MB",
        f"goal {THROUGHPUT_GOAL:.0f} orders/s",
    ]
    lines = [markdown_table(headers, rows)]
    if len(summaries) > 1:
        smallest, largest = summaries[0], summaries[-1]
        ratio = largest.throughput.median / smallest.throughput.median
        lines.append(
            f"\nScaling: throughput({largest.orders:,}) / throughput({smallest.orders:,}) = "
            f"{ratio:.2f} (goal >= {SCALING_GOAL}): {verdict(ratio >= SCALING_GOAL)}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
