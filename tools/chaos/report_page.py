"""The chaos run's report (``chaos.run.ChaosReport.to_json``) as one self-contained HTML page.

The page shows the verdict, every invariant with its examples, the faults injected per kind
(do, undo, total) and per service and operation, the answers after their deadline, the crashes
and the recovery times as HTML tables, and a timeline of the orders submitted, in flight and
finished with each crash marked on the time axis and the other timed faults binned in a strip
under it. The timeline is matplotlib's SVG, inline: the page runs no script and loads nothing,
and every string from the report is escaped.
"""

from __future__ import annotations

import html
import io
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

SERIES: tuple[tuple[str, str, str], ...] = (
    ("submitted", "submitted", "#1f6fb4"),
    ("in_flight", "in flight", "#f28e2b"),
    ("finished", "finished", "#2e9e44"),
)
# Shapes in matplotlib's marker codes: triangle, square, diamond, circle.
CRASH_STYLES: dict[str, tuple[str, str]] = {
    "devhost-kill": ("#d62728", "^"),
    "broker-kill": ("#7b3fb3", "s"),
    "services-kill": ("#8c564b", "D"),
    "crash-between-claim-and-start": ("#d4499e", "o"),
}
OTHER_COLOURS = ("#17becf", "#bcbd22", "#e15759", "#4e79a7", "#59a14f", "#b07aa1", "#9c755f")
SHAPES = ("^", "s", "D", "o")
DASH = "\N{EN DASH}"
MAX_BINS = 240
"""At most this many bins across the strip: a bin is one second or as long as needs be."""
WIDTH_INCHES, PLOT_INCHES, ROW_INCHES, LEGEND_INCHES = 9.6, 3.4, 0.24, 1.2
"""The drawing's width, the plot's height, a strip row's, and room for the legend below."""
RC: dict[RcKeyType, Any] = {
    # Text stays text (smaller, and selectable) rather than glyph outlines.
    "svg.fonttype": "none",
    # Fixed ids for the clip paths, so one report always gives the same page.
    "svg.hashsalt": "chaos-page",
    "svg.id": "timeline",
    # The report's strings are labels, never TeX: a "$" in a kind is a dollar sign.
    "text.parse_math": False,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
SVG_METADATA = ("Creator", "Date", "Format", "Type")
"""Left out of the drawing: a date would make every page differ; the rest names the tool."""


@dataclass(frozen=True)
class Marker:
    number: int
    kind: str
    at: float
    restarted_at: float | None


def render_page(report: Mapping[str, Any]) -> str:
    """The whole page for one report (the dict ``ChaosReport.to_json`` returns)."""
    failed = report.get("result") == "failed" or bool(report.get("broken_invariants"))
    verdict = "failed" if failed else "passed"
    title = f"Chaos run: seed {report.get('seed', '?')}, {_number(report.get('orders', 0))} orders"
    body = [
        _header(report, title, verdict),
        _tiles(report),
        _chart_section(report),
        _invariants(report.get("invariants", {})),
        '<div class="columns">',
        _section("Faults injected", _faults(report.get("faults_injected", {}))),
        _section("Final states", _final_states(report.get("final_states", {}))),
        "</div>",
        _section(
            "Answers after their deadline", _past_deadline(report.get("answers_past_deadline", {}))
        ),
        _section("Faults at the services", _service_faults(report)),
        _crashes(report),
        '<div class="columns">',
        _section("Time to recover (crash to the next order finished)", _recovery(report)),
        _section("Compensations", _key_values(report.get("compensations", {}), "")),
        _section("Supervisor", _key_values(report.get("supervisor", {}), "")),
        "</div>",
        _section("Net effects per service", _matrix(report.get("net_effects", {}), "service")),
        _section(
            "Settings",
            "<details><summary>the run's settings</summary><pre>"
            + _e(json.dumps(report.get("settings", {}), indent=2, sort_keys=True))
            + "</pre></details>",
        ),
    ]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)} ({verdict})</title>\n<style>{STYLE}</style>\n</head>\n"
        f'<body class="{verdict}">\n' + "\n".join(body) + "\n</body>\n</html>\n"
    )


def write_page(report: Mapping[str, Any], json_path: Path | None) -> Path | None:
    """Write the page beside the JSON report (``chaos.json`` -> ``chaos.html``) and say where."""
    if json_path is None:
        return None
    path = json_path.with_suffix(".html")
    if path == json_path:
        path = json_path.with_suffix(".page.html")
    path.write_text(render_page(report), encoding="utf-8")
    print(f"Page written to {path}")
    return path


def _header(report: Mapping[str, Any], title: str, verdict: str) -> str:
    broken = report.get("broken_invariants") or []
    submitted = report.get("submitted", {})
    settings = report.get("settings", {})
    facts = [
        f"{_number(report.get('duration_seconds', 0))} s from the first submission to the end",
        "submitted: " + (_pairs(submitted) or "nothing"),
        f"rejected at the backlog bound: {_number(report.get('rejected', 0))}",
    ]
    if isinstance(settings, Mapping) and settings:
        facts.append(
            f"rate {settings.get('rate', '?')}/s, state store {settings.get('state_store', '?')}"
        )
        if settings.get("order_steps"):
            facts.append("steps " + ", ".join(map(str, settings["order_steps"])))
    broken_list = ""
    if broken:
        broken_list = (
            '<ul class="broken">'
            + "".join(f"<li>broken: {_e(item)}</li>" for item in broken)
            + "</ul>"
        )
    return (
        f'<header><h1>{_e(title)} <span class="verdict {verdict}" id="verdict">'
        f"{verdict.upper()}</span></h1>"
        f'<p class="facts">{_e(" · ".join(facts))}</p>{broken_list}</header>'
    )


def _tiles(report: Mapping[str, Any]) -> str:
    invariants = report.get("invariants", {})
    held = sum(1 for found in invariants.values() if found.get("held"))
    crashes = report.get("crashes", [])
    survived = report.get(
        "crashes_survived", sum(1 for c in crashes if c.get("restartedAt") is not None)
    )
    recovery = report.get("recovery_seconds", {})
    faults = sum(_total(row) for row in report.get("faults_injected", {}).values())
    tiles = [
        ("invariants held", f"{held} of {len(invariants)}"),
        ("crashes survived", f"{_number(survived)} of {len(crashes)}"),
        (
            "time to recover p50 / p95",
            f"{_seconds(recovery.get('p50'))} / {_seconds(recovery.get('p95'))}",
        ),
        ("faults injected", _number(faults)),
    ]
    return (
        '<div class="tiles">'
        + "".join(
            f'<div class="tile"><div class="figure">{_e(value)}</div>'
            f'<div class="label">{_e(label)}</div></div>'
            for label, value in tiles
        )
        + "</div>"
    )


def _chart_section(report: Mapping[str, Any]) -> str:
    timeline = report.get("timeline", {})
    series = list(timeline.get("series", []))
    markers, faults = _events(report.get("crashes", []), timeline.get("events", []))
    end = max(
        [float(p.get("t", 0)) for p in series]
        + [m.at for m in markers]
        + [m.restarted_at for m in markers if m.restarted_at is not None]
        + [float(e.get("t", 0)) for e in faults]
        + [1.0]
    )
    bin_seconds = max(1.0, math.ceil(end / MAX_BINS))
    svg = chart(series, markers, faults, end, bin_seconds)
    timed_kinds = {str(e.get("kind", "")) for e in faults}
    at_services: dict[str, int] = defaultdict(int)
    for by_kind in report.get("service_faults", {}).values():
        for kind, count in by_kind.items():
            at_services[f"service-{kind}"] += int(count)
    untimed = [
        kind
        for kind, row in report.get("faults_injected", {}).items()
        if kind.startswith("agent-response-") and _total(row) and kind not in timed_kinds
    ] + [kind for kind, count in at_services.items() if count and kind not in timed_kinds]
    timed = (
        f" The report gives no times for {', '.join(untimed)} (counted in the faults table)."
        if untimed
        else ""
    )
    note = timeline.get("note", "seconds after the first submission")
    return (
        '<section><h2>Orders over time</h2><figure class="chart">'
        + svg
        + "<figcaption>Orders submitted, in flight and finished, "
        + _e(note)
        + ". Each crash is a dashed line, numbered as in the crashes table, with a band until "
        "its restart. Under the time axis every other timed fault is binned per "
        + _e(_number(bin_seconds))
        + " s, a row per kind with its count (darker: more in the bin): the agents' answers "
        "the relay lost, duplicated, delayed or reordered, and the faults injected at the "
        "services (the service rows, timed to the second)."
        + timed
        + "</figcaption></figure></section>"
    )


def _events(
    crashes: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]]
) -> tuple[list[Marker], list[Mapping[str, Any]]]:
    """The crash markers (the crashes, and any crash event the crashes do not list) and the
    other timed faults."""
    markers = [
        Marker(
            number,
            str(c.get("kind", "")),
            float(c.get("at", 0)),
            None if c.get("restartedAt") is None else float(c["restartedAt"]),
        )
        for number, c in enumerate(crashes, start=1)
    ]
    listed = {(m.kind, round(m.at, 2)) for m in markers}
    crash_kinds = set(CRASH_STYLES) | {m.kind for m in markers}
    faults: list[Mapping[str, Any]] = []
    for event in events:
        kind, at = str(event.get("kind", "")), float(event.get("t", 0))
        if kind in crash_kinds:
            if (kind, round(at, 2)) not in listed:
                markers.append(Marker(len(markers) + 1, kind, at, None))
                listed.add((kind, round(at, 2)))
        else:
            faults.append(event)
    return markers, faults


def chart(
    series: Sequence[Mapping[str, Any]],
    markers: Sequence[Marker],
    faults: Sequence[Mapping[str, Any]],
    end: float,
    bin_seconds: float,
) -> str:
    """The timeline as inline SVG: the three series, a marker per crash (with a band until its
    restart), and under the time axis a strip row per kind of the other timed faults."""
    bins = _bins(faults, bin_seconds)
    strip_inches = ROW_INCHES * len(bins)
    with matplotlib.rc_context(RC):
        figure = Figure(
            figsize=(WIDTH_INCHES, PLOT_INCHES + strip_inches + LEGEND_INCHES),
            layout="constrained",
        )
        if bins:
            orders, lowest = figure.subplots(
                2, 1, sharex=True, height_ratios=(PLOT_INCHES, strip_inches)
            )
            _strip(lowest, bins, bin_seconds)
        else:
            orders = lowest = figure.subplots()
        _orders(orders, series, markers, end)
        lowest.set_xlabel("seconds after the first submission")
        figure.legend(handles=_legend(markers), loc="outside lower center", ncols=4, frameon=False)
        drawn = io.StringIO()
        figure.savefig(drawn, format="svg", metadata=dict.fromkeys(SVG_METADATA))
    svg = drawn.getvalue()
    return svg[svg.index("<svg") :]


def _orders(
    axes: Axes, series: Sequence[Mapping[str, Any]], markers: Sequence[Marker], end: float
) -> None:
    """The three series and, for each crash, a dashed line, its shape and number above the
    plot, and a band until its restart."""
    times = [float(p.get("t", 0)) for p in series]
    for key, _, colour in SERIES:
        values = [float(p.get(key, 0)) for p in series]
        axes.plot(times, values, color=colour, linewidth=2, gid=f"series-{key}")
    axes.set(xlim=(0, end), ylim=(0, max(axes.get_ylim()[1], 1.0)), ylabel="orders")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(axis="y", color="#eeeeee")
    # In axes height, so the shapes sit on the plot's top edge whatever the orders' scale.
    top_edge = axes.get_xaxis_transform()
    for marker in markers:
        colour, shape = _crash_style(marker.kind)
        if marker.restarted_at is not None and marker.restarted_at > marker.at:
            axes.axvspan(marker.at, marker.restarted_at, color=colour, alpha=0.12, linewidth=0)
        axes.axvline(marker.at, color=colour, linestyle="--", linewidth=1.2)
        axes.plot(
            [marker.at],
            [1.0],
            marker=shape,
            markersize=7,
            color=colour,
            transform=top_edge,
            clip_on=False,
            gid=f"crash-{marker.number}",
        )
        axes.annotate(
            str(marker.number),
            (marker.at, 1.0),
            xycoords=top_edge,
            xytext=(0, 6),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
        )


def _legend(markers: Sequence[Marker]) -> list[Artist]:
    """The series, each crash kind's shape, and the band of a crash that was restarted."""
    handles: list[Artist] = [
        Line2D([], [], color=colour, linewidth=2, label=label) for _, label, colour in SERIES
    ]
    for kind in _unique(m.kind for m in markers):
        colour, shape = _crash_style(kind)
        handles.append(Line2D([], [], color=colour, marker=shape, linestyle="", label=kind))
    if markers:
        handles.append(Patch(color="#888888", alpha=0.25, label="down until restart"))
    return handles


def _bins(faults: Iterable[Mapping[str, Any]], bin_seconds: float) -> dict[str, dict[float, int]]:
    """Each kind's fault count per bin (by the second it starts at), the kinds in name order."""
    by_kind: dict[str, dict[float, int]] = defaultdict(lambda: defaultdict(int))
    for event in faults:
        start = max(float(event.get("t", 0)), 0.0) // bin_seconds * bin_seconds
        by_kind[str(event.get("kind", ""))][start] += int(event.get("count", 1))
    return {kind: dict(sorted(by_kind[kind].items())) for kind in sorted(by_kind)}


def _strip(strip: Axes, bins: Mapping[str, Mapping[float, int]], bin_seconds: float) -> None:
    """A row per kind, labelled with its total; a cell per bin with any, darker with more."""
    for row, counts in enumerate(bins.values()):
        most = max(counts.values())
        red, green, blue = to_rgb(OTHER_COLOURS[row % len(OTHER_COLOURS)])
        cells = strip.bar(
            list(counts),
            0.8,
            width=bin_seconds,
            bottom=row - 0.4,
            align="edge",
            linewidth=0,
            color=[(red, green, blue, 0.35 + 0.65 * count / most) for count in counts.values()],
        )
        for cell, start in zip(cells, counts, strict=True):
            cell.set_gid(f"faults-{row}-{start:g}")
    labels = [f"{_short(kind)} ({sum(counts.values())})" for kind, counts in bins.items()]
    strip.set_yticks(range(len(bins)), labels)
    strip.set_ylim(len(bins) - 0.5, -0.5)
    strip.tick_params(axis="y", length=0)
    strip.set_facecolor("#f3f3f3")


def _crash_style(kind: str) -> tuple[str, str]:
    """A crash kind's colour and marker shape; a kind not known here gets one of its own."""
    if kind in CRASH_STYLES:
        return CRASH_STYLES[kind]
    index = sum(map(ord, kind))
    return OTHER_COLOURS[index % len(OTHER_COLOURS)], SHAPES[index % len(SHAPES)]


def _invariants(invariants: Mapping[str, Mapping[str, Any]]) -> str:
    rows = []
    for name, found in invariants.items():
        held = bool(found.get("held"))
        examples = found.get("examples") or []
        shown = (
            '<ul class="examples">' + "".join(f"<li>{_e(e)}</li>" for e in examples) + "</ul>"
            if examples
            else ""
        )
        violations = int(found.get("violations", len(examples)))
        more = (
            f'<div class="more">{violations - len(examples)} more not listed</div>'
            if violations > len(examples)
            else ""
        )
        result = "held" if held else _e(f"violated: {_number(violations)}")
        rows.append(
            f'<tr class="{"held" if held else "violated"}" data-invariant="{_e(name)}">'
            f"<td><code>{_e(name)}</code></td>"
            f'<td class="result">{"✓" if held else "✗"} {result}</td><td>{shown}{more}</td></tr>'
        )
    table = (
        '<table id="invariants"><thead><tr><th>invariant</th><th>result</th>'
        "<th>examples of violations</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )
    return _section("Invariants", table)


def _crashes(report: Mapping[str, Any]) -> str:
    rows = []
    for number, crash in enumerate(report.get("crashes", []), start=1):
        kind = str(crash.get("kind", ""))
        at, restarted = crash.get("at"), crash.get("restartedAt")
        down = (
            _e(_number(float(restarted) - float(at)))
            if restarted is not None and at is not None
            else ""
        )
        colour, _ = _crash_style(kind)
        rows.append(
            f'<tr data-kind="{_e(kind)}"><td>{number}</td><td><span class="dot" '
            f'style="background:{colour}"></span>{_e(kind)}</td><td>{_e(_number(at))}</td>'
            f"<td>{_e(_number(restarted))}</td><td>{down}</td>"
            f"<td>{_e(_seconds(crash.get('recoverySeconds')))}</td></tr>"
        )
    table = (
        '<table id="crashes"><thead><tr><th>#</th><th>kind</th><th>at (s)</th>'
        "<th>restarted at (s)</th><th>down (s)</th><th>time to recover</th></tr></thead><tbody>"
        + ("".join(rows) or '<tr><td colspan="6">no crashes</td></tr>')
        + "</tbody></table>"
    )
    claims = report.get("claims_abandoned") or []
    if claims:
        table += (
            f"<p>Claims abandoned by a starter that died between claim and start "
            f"({len(claims)}): " + ", ".join(f"<code>{_e(c)}</code>" for c in claims) + "</p>"
        )
    return _section("Crashes", table)


def _final_states(states: Mapping[str, Any]) -> str:
    total = sum(int(n) for n in states.values()) or 1
    rows = "".join(
        f'<tr data-state="{_e(name)}"><td>{_e(name)}</td><td class="num">{_e(_number(count))}</td>'
        f'<td class="bar-cell"><span class="bar" style="width:{100 * int(count) / total:.1f}%">'
        "</span></td></tr>"
        for name, count in sorted(states.items(), key=lambda item: -int(item[1]))
    )
    return (
        '<table id="final-states"><thead><tr><th>state</th><th>orders</th><th></th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def _recovery(report: Mapping[str, Any]) -> str:
    rows = [
        ("every crash", report.get("recovery_seconds", {})),
        *report.get("recovery_seconds_by_kind", {}).items(),
    ]
    body = "".join(
        f"<tr><td>{_e(name)}</td><td class='num'>{_e(_seconds(times.get('p50')))}</td>"
        f"<td class='num'>{_e(_seconds(times.get('p95')))}</td></tr>"
        for name, times in rows
    )
    return (
        '<table id="recovery"><thead><tr><th>crashes</th><th>p50</th><th>p95</th></tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


OPERATIONS = ("do", "undo")
"""What a fault can hit: the request of a step's action or of its compensation."""


def _total(row: Mapping[str, Any]) -> int:
    return int(row.get("total", 0))


def _faults(faults: Mapping[str, Mapping[str, Any]]) -> str:
    """Faults by kind: how many hit the requests of a step's action (do) and of its
    compensation (undo), blank for faults that hit no request (crashes), and the total."""
    if not faults:
        return "<p>none</p>"
    rows = "".join(
        f'<tr data-fault="{_e(kind)}"><td>{_e(kind)}</td>'
        + "".join(
            f"<td class='num'>{_e(_number(row[key])) if key in row else ''}</td>"
            for key in OPERATIONS
        )
        + f"<td class='num'>{_e(_number(_total(row)))}</td></tr>"
        for kind, row in faults.items()
    )
    head = "".join(f"<th>{operation}</th>" for operation in OPERATIONS)
    return (
        f'<table id="faults"><thead><tr><th>kind</th>{head}<th>total</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def _past_deadline(past: Mapping[str, Any]) -> str:
    """The answers that came after their request's deadline, by source and operation."""
    sources = (
        ("agent-response-late", "agent answers the relay held past their timeout"),
        ("latency", "services' answers delayed past their timeout"),
    )
    rows = "".join(
        f'<tr data-source="{_e(key)}"><td>{_e(label)}</td>'
        + "".join(
            f"<td class='num'>{_e(_number(past.get(key, {}).get(operation, 0)))}</td>"
            for operation in OPERATIONS
        )
        + "</tr>"
        for key, label in sources
    )
    head = "".join(f"<th>{operation}</th>" for operation in OPERATIONS)
    return (
        f'<table id="past-deadline"><thead><tr><th>answers</th>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table><p>In all: {_e(_number(past.get('total', 0)))}, each "
        "at least its operation's timeout after its request was sent.</p>"
    )


def _service_faults(report: Mapping[str, Any]) -> str:
    """Each service's faults by kind, a row per operation (do, undo) when the report has
    them, else a row per service."""
    by_operation = report.get("service_faults_by_operation")
    if not by_operation:
        return _matrix(report.get("service_faults", {}), "service")
    rows = {
        f"{service} {operation}": by_kind
        for service, operations in by_operation.items()
        for operation, by_kind in operations.items()
    }
    return _matrix(rows, "service, operation")


def _key_values(values: Mapping[str, Any], heading: str) -> str:
    if not values:
        return "<p>none</p>"
    rows = "".join(
        f"<tr><td>{_e(name)}</td><td class='num'>{_e(_number(value))}</td></tr>"
        for name, value in values.items()
    )
    return (
        f"<table><thead><tr><th>{_e(heading)}</th><th>count</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _matrix(rows: Mapping[str, Mapping[str, Any]], heading: str) -> str:
    """A table of rows by columns (the union of every row's keys)."""
    if not rows:
        return "<p>none</p>"
    columns = _unique(key for row in rows.values() for key in row)
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join(
        f"<tr><td>{_e(name)}</td>"
        + "".join(f"<td class='num'>{_e(_number(row.get(c, 0)))}</td>" for c in columns)
        + "</tr>"
        for name, row in rows.items()
    )
    return (
        f"<table><thead><tr><th>{_e(heading)}</th>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def _section(title: str, content: str) -> str:
    return f"<section><h2>{_e(title)}</h2>{content}</section>"


def _pairs(values: Mapping[str, Any]) -> str:
    """Plain text: escape it where it goes."""
    return ", ".join(f"{name} {_number(value)}" for name, value in values.items())


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _short(kind: str) -> str:
    if kind.startswith("agent-response-"):
        return "answer " + kind.removeprefix("agent-response-")
    return kind.replace("service-", "service ", 1) if kind.startswith("service-") else kind


def _number(value: Any) -> str:
    if value is None:
        return DASH
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _seconds(value: Any) -> str:
    return DASH if value is None else f"{_number(value)} s"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1000px;padding:16px 20px 40px;color:#1d1d1f;background:#fafafa}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:16px;margin:22px 0 8px}
.verdict{font-size:13px;padding:3px 10px;border-radius:12px;color:#fff;vertical-align:middle}
.verdict.passed{background:#2e9e44}.verdict.failed{background:#c62828}
.facts{color:#555;margin:0}.broken{color:#c62828;margin:6px 0;padding-left:20px}
.tiles{display:flex;gap:12px;margin:14px 0}
.tile{flex:1;background:#fff;border:1px solid #ddd;border-radius:8px;padding:10px 14px}
.tile .figure{font-size:20px;font-weight:600}.tile .label{color:#666;font-size:12px}
.chart{margin:0;background:#fff;border:1px solid #ddd;border-radius:8px;padding:8px}
.chart svg{max-width:100%;height:auto;display:block}
figcaption{color:#555;font-size:12px;margin:4px 8px}
table{border-collapse:collapse;background:#fff;width:100%;font-size:13px}
th,td{border:1px solid #e2e2e2;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f2f2f2;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.held .result{color:#2e7d32}tr.violated .result{color:#c62828;font-weight:600}
tr.violated{background:#fff4f4}.examples{margin:0;padding-left:18px;font-size:12px}
.examples li{word-break:break-word}.more{color:#777;font-size:12px}
.columns{display:grid;grid-template-columns:repeat(auto-fit,minmax(280px,1fr));gap:0 16px}
.dot{display:inline-block;width:9px;height:9px;border-radius:50%;margin-right:6px}
.bar-cell{width:45%}.bar{display:inline-block;height:10px;background:#4e79a7;border-radius:2px}
section{min-width:0;overflow-x:auto}
pre{background:#fff;border:1px solid #ddd;padding:8px;overflow:auto;font-size:12px}
code{font-size:12px}
"""
