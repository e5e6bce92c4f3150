"""The chaos run's report (``chaos.run.ChaosReport.to_json``) as one self-contained HTML page.

``make chaos`` writes it beside the JSON report: the verdict, every invariant held or violated
with its examples (C1-C10), the faults injected by kind, split between the requests of a
step's action (do) and of its compensation (undo), and per service and operation, the answers
that came after their deadline, every crash with its downtime and its time to recover, the
final states and the recovery p50/p95, and a chart of the orders submitted, in flight and
finished over time with each crash marked on the time axis (a vertical marker, its shape and
colour by kind, a band while it was down) and every other timed fault (the relay's lost,
duplicated, late and reordered agent answers, and the faults injected at the services,
``service-<kind>``, counted per second) binned in a strip under it. The chart is inline SVG
drawn here; the page loads nothing (no scripts, fonts or style sheets from elsewhere), its
tooltips are SVG ``<title>`` elements, and every string from the report is escaped.
"""

from __future__ import annotations

import html
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERIES: tuple[tuple[str, str, str], ...] = (
    ("submitted", "submitted", "#1f6fb4"),
    ("in_flight", "in flight", "#f28e2b"),
    ("finished", "finished", "#2e9e44"),
)
CRASH_STYLES: dict[str, tuple[str, str]] = {
    "devhost-kill": ("#d62728", "triangle"),
    "broker-kill": ("#7b3fb3", "square"),
    "services-kill": ("#8c564b", "diamond"),
    "crash-between-claim-and-start": ("#d4499e", "circle"),
}
OTHER_COLOURS = ("#17becf", "#bcbd22", "#e15759", "#4e79a7", "#59a14f", "#b07aa1", "#9c755f")
SHAPES = ("triangle", "square", "diamond", "circle")

WIDTH = 960
LEFT = 120
RIGHT = 24
TOP = 44
PLOT_HEIGHT = 300
STRIP_ROW = 16
DASH = "\N{EN DASH}"
MAX_BINS = 240
"""At most this many bins across the strip: a bin is one second or as long as needs be."""


@dataclass(frozen=True)
class Marker:
    number: int
    kind: str
    at: float
    restarted_at: float | None
    recovery_seconds: float | None


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
        + ". Each crash is a vertical marker (numbered as in the crashes table; the band lasts "
        "until its restart); every other timed fault is binned per "
        + _e(_number(bin_seconds))
        + " s in the strip under the time axis (darker: more in the bin): the agents' answers "
        "the relay lost, duplicated, delayed or reordered, and the faults injected at the "
        "services (the service-… rows, timed to the second)."
        + timed
        + " Hover a marker, a bin or the chart for its figures.</figcaption></figure></section>"
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
            None if c.get("recoverySeconds") is None else float(c["recoverySeconds"]),
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
                markers.append(Marker(len(markers) + 1, kind, at, None, None))
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
    """The SVG chart: three lines, the crash markers, the fault strip and a legend."""
    right = WIDTH - RIGHT
    bottom = TOP + PLOT_HEIGHT
    x_step = _tick_step(end)
    x_max = max(end, x_step)
    top_value = max([float(p.get(key, 0)) for p in series for key, _, _ in SERIES] + [1.0])
    y_step = _tick_step(top_value)
    y_max = math.ceil(top_value / y_step) * y_step

    def x(t: float) -> float:
        return LEFT + (right - LEFT) * t / x_max

    def y(value: float) -> float:
        return bottom - PLOT_HEIGHT * value / y_max

    parts: list[str] = []
    # Axes, grid and tick labels.
    tick = 0.0
    while tick <= y_max + 1e-9:
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">'
            f"{_e(_number(tick))}</text>"
        )
        tick += y_step
    tick = 0.0
    while tick <= x_max + 1e-9:
        parts.append(
            f'<line class="axis" x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{bottom}" '
            f'y2="{bottom + 5}"/><text class="tick" x="{x(tick):.1f}" y="{bottom + 18}" '
            f'text-anchor="middle">{_e(_number(tick))}</text>'
        )
        tick += x_step
    parts.append(
        f'<line class="axis" x1="{LEFT}" x2="{right}" y1="{bottom}" y2="{bottom}"/>'
        f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{bottom}"/>'
        f'<text class="axis-title" x="{(LEFT + right) / 2:.1f}" y="{bottom + 36}" '
        'text-anchor="middle">seconds after the first submission</text>'
        f'<text class="axis-title" transform="translate(16 {(TOP + bottom) / 2:.1f}) rotate(-90)"'
        ' text-anchor="middle">orders</text>'
    )
    # A hover column per sample, under everything else, for the figures at that moment.
    for index, point in enumerate(series):
        t = float(point.get("t", 0))
        following = float(series[index + 1].get("t", t)) if index + 1 < len(series) else t + 1
        width = max(x(following) - x(t), 1.0)
        figures = ", ".join(f"{label} {_number(point.get(key, 0))}" for key, label, _ in SERIES)
        parts.append(
            f'<rect class="hover" x="{x(t):.1f}" y="{TOP}" width="{width:.1f}" '
            f'height="{PLOT_HEIGHT}"><title>{_e(_number(t))} s: {_e(figures)}</title></rect>'
        )
    # Crash markers: the band while down, the line, the shape above the plot, its number.
    for marker in markers:
        colour, shape = _crash_style(marker.kind)
        at = x(marker.at)
        band = ""
        if marker.restarted_at is not None and marker.restarted_at > marker.at:
            band = (
                f'<rect class="downtime" x="{at:.1f}" y="{TOP}" '
                f'width="{max(x(marker.restarted_at) - at, 1.0):.1f}" height="{PLOT_HEIGHT}" '
                f'fill="{colour}"/>'
            )
        parts.append(
            f'<g class="crash-marker" data-kind="{_e(marker.kind)}" data-t="{marker.at:g}">'
            f"<title>{_e(_describe(marker))}</title>{band}"
            f'<line class="crash-line" x1="{at:.1f}" x2="{at:.1f}" y1="{TOP - 8}" y2="{bottom}" '
            f'stroke="{colour}"/>{_shape(shape, at, TOP - 14, colour)}'
            f'<text class="marker-number" x="{at:.1f}" y="{TOP - 24}" text-anchor="middle">'
            f"{marker.number}</text></g>"
        )
    # The three series.
    for key, label, colour in SERIES:
        points = " ".join(
            f"{x(float(p.get('t', 0))):.1f},{y(float(p.get(key, 0))):.1f}" for p in series
        )
        parts.append(
            f'<polyline class="series" data-series="{key}" points="{points}" '
            f'stroke="{colour}"><title>{label}</title></polyline>'
        )
    # The strip of the other timed faults, a row per kind, a cell per bin with any.
    strip_top = bottom + 52
    by_kind: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for event in faults:
        bin_index = int(max(float(event.get("t", 0)), 0.0) // bin_seconds)
        by_kind[str(event.get("kind", ""))][bin_index] += int(event.get("count", 1))
    kinds = sorted(by_kind)
    fault_colours = {kind: OTHER_COLOURS[i % len(OTHER_COLOURS)] for i, kind in enumerate(kinds)}
    if kinds:
        parts.append(
            f'<text class="strip-title" x="{LEFT - 6}" y="{strip_top - 6}" text-anchor="end">'
            "timed faults</text>"
        )
    for row, kind in enumerate(kinds):
        row_y = strip_top + row * STRIP_ROW
        bins = by_kind[kind]
        most = max(bins.values())
        parts.append(
            f'<g class="fault-row" data-kind="{_e(kind)}" data-events="{sum(bins.values())}">'
            f'<rect class="strip-back" x="{LEFT}" y="{row_y}" width="{right - LEFT}" '
            f'height="{STRIP_ROW - 3}"/>'
            f'<text class="strip-label" x="{LEFT - 6}" y="{row_y + 10}" text-anchor="end">'
            f"{_e(_short(kind))}</text>"
        )
        for index in sorted(bins):
            count = bins[index]
            start = index * bin_seconds
            parts.append(
                f'<rect class="fault-bin" data-kind="{_e(kind)}" data-t="{start:g}" '
                f'data-count="{count}" x="{x(start):.1f}" y="{row_y}" '
                f'width="{max(x(start + bin_seconds) - x(start), 2.0):.1f}" '
                f'height="{STRIP_ROW - 3}" fill="{fault_colours[kind]}" '
                f'fill-opacity="{0.35 + 0.65 * count / most:.2f}"><title>{_e(kind)}: {count} '
                f"at {_e(_number(start))}-{_e(_number(start + bin_seconds))} s</title></rect>"
            )
        parts.append("</g>")
    legend_top = strip_top + len(kinds) * STRIP_ROW + (12 if kinds else -12)
    legend, height = _legend(
        [(label, "line", colour) for _, label, colour in SERIES]
        + [(kind, *_crash_style(kind)[::-1]) for kind in _unique(m.kind for m in markers)]
        + ([("down until restart", "band", "#888888")] if markers else [])
        + [(kind, "cell", fault_colours[kind]) for kind in kinds],
        legend_top,
    )
    parts.append(legend)
    total = legend_top + height + 8
    return (
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {total}" '
        f'width="{WIDTH}" height="{total}" role="img" aria-label="orders submitted, in flight '
        f"and finished over time, with {len(markers)} crashes and {len(faults)} other faults "
        f'marked">' + "".join(parts) + "</svg>"
    )


def _legend(items: Sequence[tuple[str, str, str]], top: float) -> tuple[str, float]:
    """Legend entries flowing left to right, wrapping at the chart's width."""
    parts = ['<g class="legend">']
    x_at, y_at = float(LEFT), top + 10
    for label, shape, colour in items:
        width = 30 + 6.6 * len(label)
        if x_at + width > WIDTH - RIGHT and x_at > LEFT:
            x_at, y_at = float(LEFT), y_at + 20
        if shape == "line":
            swatch = (
                f'<line x1="{x_at:.1f}" x2="{x_at + 18:.1f}" y1="{y_at:.1f}" y2="{y_at:.1f}" '
                f'stroke="{colour}" stroke-width="2.5"/>'
            )
        elif shape in ("band", "cell"):
            opacity = "0.25" if shape == "band" else "1"
            swatch = (
                f'<rect x="{x_at + 2:.1f}" y="{y_at - 6:.1f}" width="14" height="12" '
                f'fill="{colour}" fill-opacity="{opacity}"/>'
            )
        else:
            swatch = _shape(shape, x_at + 9, y_at, colour)
        parts.append(
            f'<g class="legend-item" data-label="{_e(label)}">{swatch}'
            f'<text x="{x_at + 24:.1f}" y="{y_at + 4:.1f}">{_e(label)}</text></g>'
        )
        x_at += width
    parts.append("</g>")
    return "".join(parts), y_at - top + 10


def _shape(shape: str, cx: float, cy: float, colour: str) -> str:
    if shape == "triangle":
        points = f"{cx:.1f},{cy - 6:.1f} {cx + 6:.1f},{cy + 5:.1f} {cx - 6:.1f},{cy + 5:.1f}"
        return f'<polygon class="crash-shape" points="{points}" fill="{colour}"/>'
    if shape == "square":
        return (
            f'<rect class="crash-shape" x="{cx - 5:.1f}" y="{cy - 5:.1f}" width="10" '
            f'height="10" fill="{colour}"/>'
        )
    if shape == "diamond":
        points = (
            f"{cx:.1f},{cy - 7:.1f} {cx + 6:.1f},{cy:.1f} {cx:.1f},{cy + 7:.1f} "
            f"{cx - 6:.1f},{cy:.1f}"
        )
        return f'<polygon class="crash-shape" points="{points}" fill="{colour}"/>'
    return f'<circle class="crash-shape" cx="{cx:.1f}" cy="{cy:.1f}" r="5.5" fill="{colour}"/>'


def _crash_style(kind: str) -> tuple[str, str]:
    if kind in CRASH_STYLES:
        return CRASH_STYLES[kind]
    index = sum(map(ord, kind))
    return OTHER_COLOURS[index % len(OTHER_COLOURS)], SHAPES[index % len(SHAPES)]


def _describe(marker: Marker) -> str:
    text = f"#{marker.number} {marker.kind} at {_number(marker.at)} s"
    if marker.restarted_at is not None:
        text += f", restarted at {_number(marker.restarted_at)} s"
    if marker.recovery_seconds is not None:
        text += f", next order finished {_number(marker.recovery_seconds)} s after"
    return text


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


def _tick_step(span: float) -> float:
    """A 1, 2 or 5 times a power of ten step giving about five ticks over ``span``."""
    raw = max(span, 1e-9) / 5
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return float(max(step, 1.0))


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
svg text{font:11px system-ui,sans-serif;fill:#333}
svg .axis-title,svg .strip-title{font-size:12px;fill:#555}
svg .grid{stroke:#eee}svg .axis{stroke:#999}
svg .series{fill:none;stroke-width:2.2;stroke-linejoin:round}
svg .hover{fill:transparent}svg .hover:hover{fill:rgba(0,0,0,.05)}
svg .downtime{fill-opacity:.12}svg .crash-line{stroke-width:1.5;stroke-dasharray:4 3}
svg .marker-number{font-size:10px;fill:#444}svg .strip-back{fill:#f3f3f3}
svg .strip-label{font-size:10px}
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
