"""Benchmark: the order pipeline's throughput, latency, cost and memory per workflow and size.

Runs the fault-free pipeline (`python -m tools.demo --faults none`) for each workflow at
each size (default: the one-step and the three-step workflow, at 1,000 and 5,000 orders),
several runs per size, every run in its own subprocess. A workflow is the ORDER_STEPS the
run's environment sets: `ship-order` for the one-step workflow, `reserve-stock,
charge-payment,ship-order` for the three-step one; at each size the runs alternate between
the workflows, so a slow minute of the shared machine falls on both. `--agents` names the
agent shapes (E1) to measure, each run's AGENT_TRANSPORT: `servicebus` (the request/response
queue pair, the default) and/or `activity`; with both, the runs alternate between them too,
and the ratios are given per shape. The store settings of the caller's environment pass
through to every run.

A run's peak RSS is the largest total resident memory of the demo process and its descendants
(the language worker, the broker and the client app run as child processes), sampled from
/proc every half second, and never less than what the kernel recorded for the demo process
itself (`os.wait4`); its CPU time is that of the whole tree over the whole run (start and
report included), per order, and that of each process role (`bench.process_tree`: the
demo's host, the language worker, the broker, the client app) while the run's clock ran.
From each run's JSON report it takes orders/s (orders / duration_seconds: first submission
to last order finished, its `measured_window`), p50/p95 end-to-end latency and
the store reads, store writes and Service Bus messages per order. Per workflow and size it
prints the medians and the highest peak RSS, then the ratios: three-step orders/s over
one-step orders/s at each size (with the agent as an activity, aim >= 0.5 at 1,000 orders;
over the queue pair a figure, without an aim) and each workflow's throughput(largest size) /
throughput(smallest size) (aim >= 0.9). Last, per agent shape and size, the CPU per order of
each process role in both workflows, an added step's CPU and the fixed part of an order.

    python -m tools.bench.pipeline_throughput [--workflows one-step,three-step] [--sizes 1000,5000]
                                        [--agents servicebus,activity] [--runs 3] [--seed 1]
                                        [--backend sqlite|cosmos] [--settle-seconds S]

The stores are the embedded SQLite ones unless `--backend cosmos` (then the demo starts a
local Cosmos DB API server, a Node child process whose memory the peak RSS includes).

Every run must be correct before its speed counts: the benchmark stops with exit code 1 as
soon as a run's report has a lost or stuck order, a side effect performed twice or any other
broken invariant, or ran other steps than its workflow's, or the demo fails. Not a test: not
collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config import STATE_STORES
from domain.policies import AGENT_TRANSPORT_ACTIVITY, AGENT_TRANSPORT_SERVICEBUS
from tools import cost
from tools.bench.figures import REPO_ROOT, Spread, machine, markdown_table, verdict
from tools.bench.process_tree import TreeUsage, wait_with_usage


@dataclass(frozen=True)
class Workflow:
    """The steps a run's orders take, set through the ORDER_STEPS of its environment."""

    name: str
    steps: tuple[str, ...]


ONE_STEP = Workflow("one-step", ("ship-order",))
THREE_STEP = Workflow("three-step", ("reserve-stock", "charge-payment", "ship-order"))
WORKFLOWS = {workflow.name: workflow for workflow in (ONE_STEP, THREE_STEP)}
AGENT_SHAPES = (AGENT_TRANSPORT_SERVICEBUS, AGENT_TRANSPORT_ACTIVITY)

# The aims: with the agent as an activity, three steps cost at most twice one step's
# throughput at this size; the three-step workflow keeps 90% of its throughput from the
# smallest size to the largest. Over the queue pair the step cost is a figure: each step's
# three messages, two triggers and raised event cost more CPU than an order's fixed part.
STEP_COST_GOAL = 0.5
STEP_COST_SIZE = 1000
STEP_COST_SHAPES = (AGENT_TRANSPORT_ACTIVITY,)
SCALING_GOAL = 0.9
# A run slower than this has hung rather than been slow; the bound adds the demo's settle time.
SLOWEST_CREDIBLE_ORDERS_PER_SECOND = 2.0
STARTUP_ALLOWANCE_SECONDS = 120.0
# The demo waits this long after its last submission for orders to finish (its own default),
# or longer for a size a fault-free pipeline finishes at this rate: a slow run is not a stuck one.
DEMO_SETTLE_SECONDS = 120.0
SETTLE_ORDERS_PER_SECOND = 10.0
LOG_TAIL_CHARS = 3_000
# With no faults every valid order should end here; one that ends otherwise (Error,
# Compensated, CompensationFailed) was given up on, its deadlines run out under the load.
PROCESSED = "Processed"
# The report's counts whose every non-zero value makes a run incorrect.
CORRECTNESS_COUNTS = {
    "lost": "lost orders",
    "stuck": "stuck orders",
    "double_side_effects": "double side effects",
}


class BenchError(RuntimeError):
    """A run failed or was incorrect; the message says which run, and what went wrong."""


@dataclass(frozen=True)
class PipelineRun:
    orders: int
    orders_per_second: float
    p50_ms: float
    p95_ms: float
    start_p50_ms: float
    start_p95_ms: float
    """From an order's acceptance to the first agent request a service served."""
    store_reads: float
    store_writes: float
    messages: float
    peak_rss_mb: float
    cpu_ms_per_order: float
    measured_cpu_ms_per_order_by_role: dict[str, float]
    """The CPU per order of each process role (`bench.process_tree`) while the run's clock
    ran (the report's `measured_window`): without start-up, shutdown and report."""
    gave_up: dict[str, int]
    """Valid orders that ended in another final state than Processed, by state."""
    cost: dict[str, Any] = field(default_factory=dict)
    """The run's report's cost section (`tools.cost`)."""

    @property
    def gave_up_total(self) -> int:
        return sum(self.gave_up.values())


@dataclass(frozen=True)
class SetSummary:
    """One workflow with one agent shape at one size: medians over its runs, and the highest
    peak RSS."""

    workflow: Workflow
    agents: str
    orders: int
    throughput: Spread
    p50_ms: float
    p95_ms: float
    start_p50_ms: float
    start_p95_ms: float
    store_reads: float
    store_writes: float
    messages: float
    peak_rss_mb: float
    cpu_ms_per_order: float
    measured_cpu_ms_per_order_by_role: dict[str, float]
    """Per role, the median over the runs."""
    gave_up: int
    """The most valid orders of one run that did not end Processed."""

    @classmethod
    def of(cls, workflow: Workflow, agents: str, runs: Sequence[PipelineRun]) -> SetSummary:
        def median(values: Sequence[float]) -> float:
            return Spread.of(values).median

        return cls(
            workflow=workflow,
            agents=agents,
            orders=runs[0].orders,
            throughput=Spread.of([run.orders_per_second for run in runs]),
            p50_ms=median([run.p50_ms for run in runs]),
            p95_ms=median([run.p95_ms for run in runs]),
            start_p50_ms=median([run.start_p50_ms for run in runs]),
            start_p95_ms=median([run.start_p95_ms for run in runs]),
            store_reads=median([run.store_reads for run in runs]),
            store_writes=median([run.store_writes for run in runs]),
            messages=median([run.messages for run in runs]),
            peak_rss_mb=max(run.peak_rss_mb for run in runs),
            cpu_ms_per_order=median([run.cpu_ms_per_order for run in runs]),
            measured_cpu_ms_per_order_by_role={
                role: median([run.measured_cpu_ms_per_order_by_role.get(role, 0.0) for run in runs])
                for role in {role for run in runs for role in run.measured_cpu_ms_per_order_by_role}
            },
            gave_up=max(run.gave_up_total for run in runs),
        )


@dataclass(frozen=True)
class DemoSettings:
    """What every run of the demo gets, whatever its workflow and size."""

    seed: int
    backend: str
    settle_seconds: float | None

    def settle_for(self, orders: int) -> float:
        if self.settle_seconds is not None:
            return self.settle_seconds
        return max(DEMO_SETTLE_SECONDS, orders / SETTLE_ORDERS_PER_SECOND)


def demo_command(orders: int, settings: DemoSettings, report: Path) -> list[str]:
    command = [sys.executable, "-m", "tools.demo", "--orders", str(orders), "--faults", "none"]
    command += ["--seed", str(settings.seed), "--backend", settings.backend]
    command += ["--report", str(report), "--no-progress"]
    command += ["--settle-seconds", str(settings.settle_for(orders))]
    return command


def demo_environment(workflow: Workflow, agents: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment with the workflow's ORDER_STEPS and the agent shape's
    AGENT_TRANSPORT, which the demo's app takes."""
    return {**environ, "ORDER_STEPS": ",".join(workflow.steps), "AGENT_TRANSPORT": agents}


def run_once(
    workflow: Workflow, agents: str, orders: int, settings: DemoSettings, label: str
) -> PipelineRun:
    """One demo run in its own process; its report and the process's peak RSS."""
    bound = (
        STARTUP_ALLOWANCE_SECONDS
        + settings.settle_for(orders)
        + orders / SLOWEST_CREDIBLE_ORDERS_PER_SECOND
    )
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as work_dir:
        report_path = Path(work_dir) / "report.json"
        log_path = Path(work_dir) / "demo.log"
        with log_path.open("w", encoding="utf-8") as log:
            process = subprocess.Popen(
                demo_command(orders, settings, report_path),
                cwd=REPO_ROOT,
                env=demo_environment(workflow, agents, os.environ),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            exit_code, usage = wait_with_usage(process, bound)
        if exit_code is None:
            raise BenchError(f"{label}: the demo did not finish within {bound:.0f} s; killed it")
        if not report_path.exists():
            raise BenchError(
                f"{label}: the demo exited with code {exit_code} and wrote no report; "
                f"its output ends with:\n{_tail(log_path)}"
            )
        report = json.loads(report_path.read_text(encoding="utf-8"))
        check_correct(report, workflow, agents, label, _tail(log_path))
        if exit_code != 0:
            raise BenchError(f"{label}: the demo exited with code {exit_code}:\n{_tail(log_path)}")
    return _run_from_report(report, usage)


def check_correct(
    report: dict[str, Any], workflow: Workflow, agents: str, label: str, log_tail: str
) -> None:
    """Raise BenchError unless the run was correct and ran the workflow's steps through the
    agent shape asked for.

    Correct: no lost or stuck order, no side effect performed twice, and no other broken
    invariant the report names (``broken_invariants``, when the report has it).
    """
    missing = [name for name in (*CORRECTNESS_COUNTS, "measured_window") if name not in report]
    if missing:
        raise BenchError(
            f"{label}: the demo's report has no {', '.join(missing)}; "
            f"has its format changed? (it has {', '.join(sorted(report))})"
        )
    problems = [
        f"{int(report[name])} {what}" for name, what in CORRECTNESS_COUNTS.items() if report[name]
    ]
    broken = [str(invariant) for invariant in report.get("broken_invariants") or []]
    if broken:
        problems.append(f"broken invariants: {'; '.join(broken)}")
    if not problems and report.get("result", "passed") != "passed":
        problems.append(f"the report's result is {report['result']!r}")
    if problems:
        examples = (report.get("lost_orders") or []) + (report.get("stuck_orders") or [])
        raise BenchError(
            f"{label}: the pipeline was incorrect: {', '.join(problems)}"
            + (f" (e.g. {examples[:5]})" if examples else "")
            + f"; its output ends with:\n{log_tail}"
        )
    ran = (report.get("settings") or {}).get("order_steps")
    if ran is not None and tuple(ran) != workflow.steps:
        raise BenchError(
            f"{label}: the orders ran the steps {', '.join(ran)}, not the {workflow.name} "
            f"workflow's {', '.join(workflow.steps)}"
        )
    shape = (report.get("settings") or {}).get("agent_transport")
    if shape is not None and shape != agents:
        raise BenchError(f"{label}: the agents ran as {shape!r}, not as {agents!r}")


def _run_from_report(report: dict[str, Any], usage: TreeUsage) -> PipelineRun:
    latency = report["latency_ms"]
    start = report["start_latency_ms"]
    per_order = report["per_order"]
    orders = max(1, int(report["orders"]))
    window = report["measured_window"]
    return PipelineRun(
        orders=int(report["orders"]),
        orders_per_second=report["orders"] / report["duration_seconds"],
        p50_ms=float(latency["p50"]),
        p95_ms=float(latency["p95"]),
        start_p50_ms=float(start["p50"]),
        start_p95_ms=float(start["p95"]),
        store_reads=float(per_order["store_reads"]),
        store_writes=float(per_order["store_writes"]),
        messages=float(per_order["messages"]),
        peak_rss_mb=usage.peak_rss_kb / 1024,
        cpu_ms_per_order=1000 * usage.cpu_seconds / orders,
        measured_cpu_ms_per_order_by_role={
            role: 1000 * seconds / orders
            for role, seconds in usage.cpu_seconds_by_role(
                float(window["start"]), float(window["end"])
            ).items()
        },
        gave_up={
            state: int(count)
            for state, count in sorted((report.get("final_states") or {}).items())
            if state != PROCESSED and count
        },
        cost=report.get("cost") or {},
    )


def _tail(log_path: Path) -> str:
    return log_path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.pipeline_throughput",
        description=(
            "Throughput, latency, cost per order and peak RSS of the fault-free pipeline, "
            "per workflow (ORDER_STEPS) and size."
        ),
    )
    parser.add_argument(
        "--workflows",
        default=",".join(WORKFLOWS),
        help=(
            "comma-separated workflows to run: one-step (ORDER_STEPS=ship-order), three-step "
            "(the default steps)"
        ),
    )
    parser.add_argument(
        "--sizes", default="1000,5000", help="comma-separated order counts, one size per set"
    )
    parser.add_argument(
        "--agents",
        default=os.environ.get("AGENT_TRANSPORT", AGENT_TRANSPORT_SERVICEBUS),
        help=(
            "comma-separated agent shapes (E1) to measure, each run's AGENT_TRANSPORT: "
            f"{' and/or '.join(AGENT_SHAPES)} (default: AGENT_TRANSPORT of this environment, "
            f"else {AGENT_TRANSPORT_SERVICEBUS})"
        ),
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per workflow and size")
    parser.add_argument("--seed", type=int, default=1, help="workload seed, the same every run")
    parser.add_argument(
        "--backend",
        choices=STATE_STORES,
        default="sqlite",
        help="passed to the demo: the stores' backend (cosmos starts a local Cosmos DB API server)",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=None,
        help=(
            "passed to the demo: how long to wait after the last submission for orders to "
            f"finish (default: {DEMO_SETTLE_SECONDS:.0f}, or one second per "
            f"{SETTLE_ORDERS_PER_SECOND:.0f} orders if longer)"
        ),
    )
    args = parser.parse_args(argv)
    try:
        args.sizes = sorted({int(size) for size in args.sizes.split(",")})
    except ValueError:
        parser.error(f"--sizes must be comma-separated order counts, got {args.sizes!r}")
    if args.runs < 1 or min(args.sizes) < 1:
        parser.error("--runs and every size must be at least 1")
    names = [name.strip() for name in args.workflows.split(",") if name.strip()]
    unknown = [name for name in names if name not in WORKFLOWS]
    if unknown or not names:
        parser.error(
            f"--workflows must name some of {', '.join(WORKFLOWS)}, got {args.workflows!r}"
        )
    # In the table's order, whatever the order given.
    args.workflows = [workflow for name, workflow in WORKFLOWS.items() if name in names]
    shapes = [shape.strip() for shape in args.agents.split(",") if shape.strip()]
    if not shapes or any(shape not in AGENT_SHAPES for shape in shapes):
        parser.error(f"--agents must name some of {', '.join(AGENT_SHAPES)}, got {args.agents!r}")
    args.agents = [shape for shape in AGENT_SHAPES if shape in shapes]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workflows: list[Workflow] = args.workflows
    shapes: list[str] = args.agents
    described = "; ".join(f"{w.name} ({','.join(w.steps)})" for w in workflows)
    print(
        f"Order pipeline, faults none: workflows {described}; "
        f"sizes {', '.join(f'{s:,}' for s in args.sizes)}, runs per size: {args.runs}, "
        f"seed {args.seed}, stores {args.backend}, agents {', '.join(shapes)}; {machine()}",
        flush=True,
    )
    settings = DemoSettings(args.seed, args.backend, args.settle_seconds)
    sets = [(shape, workflow) for shape in shapes for workflow in workflows]
    summaries: list[SetSummary] = []
    costs: dict[str, dict[str, Any]] = {}
    try:
        for orders in args.sizes:
            runs: dict[tuple[str, str], list[PipelineRun]] = {
                (shape, workflow.name): [] for shape, workflow in sets
            }
            for run in range(1, args.runs + 1):
                for shape, workflow in sets:
                    label = (
                        f"{workflow.name}, agents {shape}, {orders:,} orders, run {run}/{args.runs}"
                    )
                    result = run_once(workflow, shape, orders, settings, label)
                    runs[(shape, workflow.name)].append(result)
                    costs[f"{workflow.name}, agents {shape}, {orders:,} orders"] = result.cost
                    print(f"  {label}: {describe(result)}", flush=True)
            summaries += [SetSummary.of(w, a, runs[(a, w.name)]) for a, w in sets]
    except BenchError as exc:
        print(f"pipeline benchmark failed: {exc}", file=sys.stderr)
        return 1
    print()
    print(summary(summaries))
    for label, section in costs.items():
        if section:
            print(f"\n{label}, its last run:")
            print("\n".join(cost.render_section(section)))
    gave_up = [s for s in summaries if s.gave_up]
    if gave_up:
        print(
            "pipeline benchmark: fault-free orders were given up on (ended Error, Compensated "
            "or CompensationFailed) in "
            + ", ".join(
                f"{s.workflow.name} (agents {s.agents}) at {s.orders:,} orders" for s in gave_up
            )
            + "; those figures are not a fault-free pipeline's",
            file=sys.stderr,
        )
        return 1
    return 0


def describe(run: PipelineRun) -> str:
    return (
        f"{run.orders_per_second:.1f} orders/s, p50 {run.p50_ms:,.0f} ms, "
        f"p95 {run.p95_ms:,.0f} ms, accepted to first agent request p50 "
        f"{run.start_p50_ms:,.0f} ms, p95 {run.start_p95_ms:,.0f} ms, "
        f"per order {run.store_reads:.2f} reads, "
        f"{run.store_writes:.2f} writes, {run.messages:.2f} messages, "
        f"peak RSS {run.peak_rss_mb:,.0f} MB, CPU {run.cpu_ms_per_order:.1f} ms/order"
        + (
            f"; GAVE UP on {run.gave_up_total:,} fault-free orders "
            f"({', '.join(f'{state} {count:,}' for state, count in run.gave_up.items())})"
            if run.gave_up
            else ""
        )
    )


def summary(summaries: Sequence[SetSummary]) -> str:
    """The Markdown table, then the ratios the aims name and whether each is met."""
    rows = [
        [
            s.workflow.name,
            s.agents,
            f"{s.orders:,}",
            str(s.throughput.runs),
            f"{s.throughput.median:.1f}",
            f"{s.throughput.low:.1f}-{s.throughput.high:.1f}",
            f"{s.p50_ms:,.0f}",
            f"{s.p95_ms:,.0f}",
            f"{s.start_p50_ms:,.0f}",
            f"{s.start_p95_ms:,.0f}",
            f"{s.store_reads:.2f}",
            f"{s.store_writes:.2f}",
            f"{s.messages:.2f}",
            f"{s.peak_rss_mb:,.0f}",
            f"{s.cpu_ms_per_order:.1f}",
            f"{s.gave_up:,}",
        ]
        for s in summaries
    ]
    headers = [
        "workflow",
        "agents",
        "orders",
        "runs",
        "median orders/s",
        "min-max",
        "p50 ms",
        "p95 ms",
        "start p50 ms",
        "start p95 ms",
        "reads/order",
        "writes/order",
        "messages/order",
        "peak RSS MB",
        "CPU ms/order",
        "gave up",
    ]
    lines = [markdown_table(headers, rows), ""]
    lines += ratio_lines(summaries)
    lines += step_cpu_lines(summaries)
    return "\n".join(lines)


def _workflow_pairs(summaries: Sequence[SetSummary]) -> list[tuple[SetSummary, SetSummary]]:
    """The one-step and the three-step set of each agent shape and size that has both, in
    the order of AGENT_SHAPES, then smallest size first."""
    by_set = {(s.agents, s.workflow.name, s.orders): s for s in summaries}
    pairs = []
    for shape in AGENT_SHAPES:
        for orders in sorted({s.orders for s in summaries if s.agents == shape}):
            one = by_set.get((shape, ONE_STEP.name, orders))
            three = by_set.get((shape, THREE_STEP.name, orders))
            if one is not None and three is not None:
                pairs.append((one, three))
    return pairs


def step_cpu_lines(summaries: Sequence[SetSummary]) -> list[str]:
    """Per agent shape and size, the CPU per order of each process for both workflows while
    the runs' clocks ran, and what an added step costs beside the fixed part of an order.

    With CPU the limit, three-step / one-step orders/s is (F + s) / (F + 3 s) for a fixed part
    F and a step cost s: it reaches 0.5 only while s <= F.
    """
    lines: list[str] = []
    for one, three in _workflow_pairs(summaries):
        added = len(three.workflow.steps) - len(one.workflow.steps)
        one_by_role = one.measured_cpu_ms_per_order_by_role
        three_by_role = three.measured_cpu_ms_per_order_by_role
        measured = [
            (role, one_by_role.get(role, 0.0), three_by_role.get(role, 0.0))
            for role in sorted(
                one_by_role.keys() | three_by_role.keys(),
                key=lambda role: -three_by_role.get(role, 0.0),
            )
        ]
        one_ms, three_ms = sum(one_by_role.values()), sum(three_by_role.values())
        step = (three_ms - one_ms) / added
        fixed = one_ms - step * len(one.workflow.steps)
        rows = [
            [role, f"{one_role:.1f}", f"{three_role:.1f}", f"{(three_role - one_role) / added:.1f}"]
            for role, one_role, three_role in [
                *measured,
                ("all, while measured", one_ms, three_ms),
                (
                    "whole run: start-up, shutdown, report",
                    one.cpu_ms_per_order,
                    three.cpu_ms_per_order,
                ),
            ]
        ]
        lines += [
            "",
            f"CPU ms per order by process at {one.orders:,} orders, agents {one.agents}, from the "
            "first submission to the last order finished:",
            "",
            markdown_table(["process", ONE_STEP.name, THREE_STEP.name, "per added step"], rows),
            "",
            f"CPU per step {step:.1f} ms, fixed part of an order {fixed:.1f} ms (agents "
            f"{one.agents})",
        ]
    return lines


def ratio_lines(summaries: Sequence[SetSummary]) -> list[str]:
    """Each ratio, per agent shape, and whether its aim is met where it has one.

    An aim is met only when no set behind its ratio gave up on a fault-free order: such a
    set's orders/s counts orders that did not complete.
    """
    return [
        line
        for shape in AGENT_SHAPES
        for line in _ratio_lines_of(shape, [s for s in summaries if s.agents == shape])
    ]


def _gave_up(sets: Sequence[SetSummary]) -> str:
    """A figure without an aim still says when its sets gave up on fault-free orders."""
    gave_up = sum(s.gave_up for s in sets)
    return f" ({gave_up:,} fault-free orders given up on)" if gave_up else ""


def _judged(ratio: float, goal: float, sets: Sequence[SetSummary]) -> str:
    gave_up = sum(s.gave_up for s in sets)
    if gave_up:
        return f"NOT met: {gave_up:,} fault-free orders given up on"
    return verdict(ratio >= goal)


def _ratio_lines_of(shape: str, summaries: Sequence[SetSummary]) -> list[str]:
    """The ratios of the sets of one agent shape."""
    by_set = {(s.workflow.name, s.orders): s for s in summaries}
    sizes = sorted({s.orders for s in summaries})
    agents = f", agents {shape}"
    lines = []
    for one, three in _workflow_pairs(summaries):
        orders = one.orders
        ratio = three.throughput.median / one.throughput.median
        if shape not in STEP_COST_SHAPES:
            aim = _gave_up([one, three])
        elif orders == STEP_COST_SIZE:
            aim = f" (aim >= {STEP_COST_GOAL}: {_judged(ratio, STEP_COST_GOAL, [one, three])})"
        else:
            aim = f" (the aim of >= {STEP_COST_GOAL} is at {STEP_COST_SIZE:,} orders)"
        lines.append(
            f"Step cost at {orders:,} orders{agents}: three-step / one-step orders/s = "
            f"{three.throughput.median:.1f} / {one.throughput.median:.1f} = {ratio:.2f}{aim}"
        )
    for workflow in (ONE_STEP, THREE_STEP):
        measured = [by_set[(workflow.name, o)] for o in sizes if (workflow.name, o) in by_set]
        if len(measured) < 2:
            continue
        smallest, largest = measured[0], measured[-1]
        ratio = largest.throughput.median / smallest.throughput.median
        lines.append(
            f"Scaling of {workflow.name}{agents}: throughput({largest.orders:,}) / "
            f"throughput({smallest.orders:,}) = {ratio:.2f} (aim >= {SCALING_GOAL}): "
            f"{_judged(ratio, SCALING_GOAL, [smallest, largest])}"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
