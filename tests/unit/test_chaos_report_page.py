"""The chaos report's page (`chaos.report_page`): one self-contained HTML document that loads
nothing, escapes every string from the report, shows every invariant held or violated with its
examples, and marks every crash and every timed fault of the run on its chart's time axis
(C1-C10 are what the report proves; the page is how people read it).

The chart is read as drawn: where each line, marker and strip cell is on the drawing (the
``series-*``, ``crash-<number>`` and ``faults-<row>-<second>`` shapes), and its text."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path
from typing import Any

from tools.chaos.invariants import Findings
from tools.chaos.report_page import render_page, write_page
from tools.chaos.run import ChaosReport, CrashEvent
from tools.demo.evidence import Evidence

VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "source", "wbr"}
# The drawing's own elements may close themselves (<path/>); they are not HTML void elements.
SELF_CLOSED_SVG = {"g", "path", "use", "rect"}
INJECTED = "<script>alert(\"x\")</script> & 'quoted'"


class Document(HTMLParser):
    """Every element with its attributes, in order, and whether each closed where it opened."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.open: list[str] = []
        self.problems: list[str] = []
        self.declarations: list[str] = []
        self.text: list[str] = []

    def handle_decl(self, decl: str) -> None:
        self.declarations.append(decl)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        if tag not in VOID | SELF_CLOSED_SVG:
            self.problems.append(f"<{tag}/> is not an element that may close itself")

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.open[-1:] or 'nothing'}")
            return
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def all(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [
            found
            for name, found in self.elements
            if name == tag and all(found.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]

    def having(self, attribute: str) -> list[dict[str, str | None]]:
        return [found for _, found in self.elements if attribute in found]


class Tables(HTMLParser):
    """The text of every cell of every table with an id, row by row."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = dict(attrs).get("id")
            if self._table is not None:
                self.tables[self._table] = []
        elif self._table is not None and tag == "tr":
            self.tables[self._table].append([])
        elif self._table is not None and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._table is not None and self._cell is not None:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


class Drawing(HTMLParser):
    """The chart's shapes (paths and placed markers) and texts, each with where it is drawn."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.groups: list[str] = []
        self.shapes: dict[str, list[tuple[float, float]]] = {}
        self.styles: dict[str, str] = {}
        self.texts: list[tuple[str, float, float]] = []
        self._text: tuple[float, float, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "g":
            self.groups.append(found.get("id") or "")
        elif tag == "text":
            self._text = (float(found["x"] or 0), float(found["y"] or 0), [])
        elif tag in ("path", "use") and "id" not in found and self.groups:
            # A shape belongs to the innermost group named by the page, not by the drawing.
            named = next(g for g in reversed(self.groups) if g)
            if named not in self.shapes:
                numbers = [float(n) for n in re.findall(r"-?[\d.]+", found.get("d") or "")]
                if tag == "use":
                    numbers = [float(found["x"] or 0), float(found["y"] or 0)]
                self.shapes[named] = list(zip(numbers[::2], numbers[1::2], strict=True))
                self.styles[named] = found.get("style") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "g":
            self.groups.pop()
        elif tag == "text" and self._text is not None:
            x, y, text = self._text
            self.texts.append(("".join(text), x, y))
            self._text = None

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text[2].append(data)

    def words(self) -> list[str]:
        return [text for text, _, _ in self.texts]

    def time_axis(self, series: list[dict[str, float]]) -> Callable[[float], float]:
        """Where a time is across the chart, from where the series' first and last samples are."""
        (first, _), *_, (last, _) = self.shapes["series-submitted"]
        start, end = series[0]["t"], series[-1]["t"]
        return lambda t: first + (t - start) * (last - first) / (end - start)

    def strip(self) -> dict[str, dict[float, float]]:
        """Each strip row's label, and its cells by the second they start at, with their
        opacity (darker: more faults in the bin)."""
        labels = [text for text in self.words() if re.fullmatch(r".+ \(\d+\)", text)]
        rows: dict[str, dict[float, float]] = {label: {} for label in labels}
        for name, style in self.styles.items():
            if cell := re.fullmatch(r"faults-(\d+)-([\d.]+)", name):
                opacity = re.search(r"fill-opacity: ([\d.]+)", style)
                shade = float(opacity.group(1)) if opacity else 1.0
                rows[labels[int(cell.group(1))]][float(cell.group(2))] = shade
        return rows


def drawn(page: str) -> Drawing:
    drawing = Drawing()
    drawing.feed(page[page.index("<svg") : page.index("</svg>")])
    drawing.close()
    return drawing


def table_text(page: str, table_id: str) -> list[list[str]]:
    tables = Tables()
    tables.feed(page)
    tables.close()
    return tables.tables[table_id]


def parsed(page: str) -> Document:
    document = Document()
    document.feed(page)
    document.close()
    assert document.problems == []
    assert document.open == []
    return document


def report() -> dict[str, Any]:
    """A small run: two held invariants and a violated one, three crashes (one only in the
    timeline's events), agent answers lost and duplicated, one of them in the same second."""
    return {
        "orders": 6,
        "seed": 7,
        "submitted": {"order": 6, "resend": 1, "conflict": 1, "malformed": 1},
        "final_states": {"Processed": 4, "Compensated": 1, "Error": 1},
        "rejected": 0,
        "invariants": {
            "lost": {"held": True, "violations": 0, "examples": []},
            "stuck": {"held": True, "violations": 0, "examples": []},
            "side_effect_at_most_once": {
                "held": False,
                "violations": 3,
                "examples": [f"order-1: charged twice {INJECTED}", "order-2: charged twice"],
            },
        },
        "broken_invariants": ["side_effect_at_most_once: 3"],
        "faults_injected": {
            "transient": {"do": 7, "undo": 2, "total": 9},
            "devhost-kill": {"total": 1},
            f"odd {INJECTED}": {"total": 1},
        },
        "answers_past_deadline": {
            "agent-response-late": {"do": 2, "undo": 0},
            "latency": {"do": 0, "undo": 1},
            "total": 3,
        },
        "service_faults": {"payment": {"transient": 9, "permanent": 0}},
        "crashes": [
            {"kind": "devhost-kill", "at": 2.5, "restartedAt": 4.0, "recoverySeconds": 2.1},
            {"kind": "broker-kill", "at": 5.25, "restartedAt": 6.0, "recoverySeconds": 0.4},
        ],
        "claims_abandoned": ["order-3:1"],
        "crashes_survived": 2,
        "recovery_seconds": {"p50": 0.4, "p95": 2.1},
        "recovery_seconds_by_kind": {"devhost-kill": {"p50": 2.1, "p95": 2.1}},
        "compensations": {"started": 1, "completed": 1, "failed": 0},
        "supervisor": {"retries": 2},
        "net_effects": {"payment": {"charged": 1, "refunded": 1, "net": 0}},
        "timeline": {
            "note": "seconds after the first submission",
            "series": [
                {"t": float(t), "submitted": min(6.0, 2.0 * t), "in_flight": 1.0, "finished": t}
                for t in range(7)
            ],
            "events": [
                {"t": 2.5, "kind": "devhost-kill"},
                {"t": 5.25, "kind": "broker-kill"},
                {"t": 3.0, "kind": "crash-between-claim-and-start"},
                {"t": 1.2, "kind": "agent-response-lost"},
                {"t": 1.7, "kind": "agent-response-lost"},
                {"t": 4.1, "kind": "agent-response-lost"},
                {"t": 2.0, "kind": "agent-response-duplicated"},
                {"t": 6.5, "kind": f"agent-response-{INJECTED}"},
            ],
        },
        "duration_seconds": 6.5,
        "settings": {"rate": 2.0, "state_store": "sqlite", "order_steps": ["charge-payment"]},
        "result": "failed",
    }


def test_the_page_is_one_well_formed_document_that_loads_nothing() -> None:
    page = render_page(report())
    document = parsed(page)

    assert document.declarations == ["DOCTYPE html"]
    assert [tag for tag, _ in document.elements[:3]] == ["html", "head", "meta"]
    for tag in ("html", "head", "body", "svg"):
        assert len(document.all(tag)) == 1, tag
    for tag in ("script", "link", "img", "iframe", "object", "embed"):
        assert document.all(tag) == [], tag
    # The drawing refers to its own parts only (markers, clip paths): "#" and an id.
    references = [
        str(found[name])
        for name in ("src", "href", "xlink:href")
        for found in document.having(name)
    ]
    assert references
    assert all(ref.startswith("#") for ref in references)
    assert all(url.startswith("#") for url in re.findall(r"url\(([^)]*)\)", page))
    assert 'src="http' not in page
    assert 'href="http' not in page
    assert "@import" not in page
    namespaces = (
        'xmlns="http://www.w3.org/2000/svg"',
        'xmlns:xlink="http://www.w3.org/1999/xlink"',
    )
    for namespace in namespaces:
        page = page.replace(namespace, "")
    assert "http" not in page


def test_every_string_from_the_report_is_escaped() -> None:
    page = render_page(report())
    document = parsed(page)

    assert document.all("script") == []
    assert "<script>" not in page
    assert (
        page.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#x27;quoted&#x27;")
        >= 3
    )
    text = "".join(document.text)
    assert f"order-1: charged twice {INJECTED}" in text
    assert f"odd {INJECTED}" in text
    assert f"answer {INJECTED} (1)" in drawn(page).strip()


def test_the_chart_draws_the_three_series_and_marks_every_crash_and_every_fault() -> None:
    given = report()
    series = given["timeline"]["series"]
    drawing = drawn(render_page(given))
    x_at = drawing.time_axis(series)

    for key in ("submitted", "in_flight", "finished"):
        line = drawing.shapes[f"series-{key}"]
        assert [round(x, 1) for x, _ in line] == [round(x_at(p["t"]), 1) for p in series]
    # The finished line climbs one order a second: its points rise evenly.
    heights = [y for _, y in drawing.shapes["series-finished"]]
    assert len({round(a - b, 1) for a, b in pairwise(heights)}) == 1
    # Two crashes from the list and the one only the timeline's events hold, each at its time,
    # numbered above it.
    crashes = {name: shape[0] for name, shape in drawing.shapes.items() if name.startswith("crash")}
    assert list(crashes) == ["crash-1", "crash-2", "crash-3"]
    for (name, (x, y)), at in zip(crashes.items(), (2.5, 5.25, 3.0), strict=True):
        assert abs(x - x_at(at)) < 0.5, name
        number = name.removeprefix("crash-")
        assert any(t == number and abs(tx - x) < 0.5 and ty < y for t, tx, ty in drawing.texts)
    strip = drawing.strip()
    assert list(strip) == [f"answer {INJECTED} (1)", "answer duplicated (1)", "answer lost (3)"]
    assert list(strip["answer duplicated (1)"]) == [2.0]
    assert list(strip[f"answer {INJECTED} (1)"]) == [6.0]
    # 1.2 s and 1.7 s share the one-second bin starting at 1, darker than the bin of one.
    lost = strip["answer lost (3)"]
    assert list(lost) == [1.0, 4.0]
    assert lost[1.0] > lost[4.0]
    cell = next(n for n in drawing.shapes if n.startswith("faults-") and n.endswith("-4"))
    assert abs(drawing.shapes[cell][0][0] - x_at(4.0)) < 0.5
    legend = {"submitted", "in flight", "finished", "down until restart"}
    legend |= {"devhost-kill", "broker-kill", "crash-between-claim-and-start"}
    assert legend <= set(drawing.words())


def test_the_page_shows_the_verdict_invariants_crashes_and_recovery() -> None:
    page = render_page(report())
    document = parsed(page)
    text = " ".join(" ".join(document.text).split())

    assert "FAILED" in text
    assert "broken: side_effect_at_most_once: 3" in text
    rows = {
        row["data-invariant"]: row["class"] for row in document.all("tr") if "data-invariant" in row
    }
    assert rows == {"lost": "held", "stuck": "held", "side_effect_at_most_once": "violated"}
    assert "✗ violated: 3" in text
    assert "order-2: charged twice" in text
    assert "1 more not listed" in text
    crash_rows = [row["data-kind"] for row in document.all("tr") if "data-kind" in row]
    assert crash_rows == ["devhost-kill", "broker-kill"]
    assert "p50 p95 every crash 0.4 s 2.1 s devhost-kill 2.1 s 2.1 s" in text
    assert "order-3:1" in text
    assert [row["data-state"] for row in document.all("tr") if "data-state" in row] == [
        "Processed",
        "Compensated",
        "Error",
    ]


def test_agent_answers_counted_but_not_timed_are_named_under_the_chart() -> None:
    given = report()
    given["faults_injected"]["agent-response-late"] = {"do": 3, "undo": 1, "total": 4}
    text = " ".join(" ".join(parsed(render_page(given)).text).split())

    # The fixture's payment transients have no times either (a report without them).
    assert (
        "gives no times for agent-response-late, service-transient (counted in the faults table)"
        in text
    )
    assert "agent-response-lost (counted" not in text


def test_faults_at_the_services_are_binned_by_second_and_kind_with_their_counts() -> None:
    given = report()
    given["service_faults"] = {
        "payment": {"transient": 9, "permanent": 0, "hang": 2},
        "stock": {"transient": 1},
    }
    given["timeline"]["events"] += [
        {"t": 1.1, "kind": "service-transient", "service": "payment", "count": 5},
        {"t": 1.6, "kind": "service-transient", "service": "stock", "count": 1},
        {"t": 3.2, "kind": "service-transient", "service": "payment", "count": 4},
    ]
    page = render_page(given)
    text = " ".join(" ".join(parsed(page).text).split())

    # 5 at payment and 1 at stock in the second from 1 s, 4 in the second from 3 s.
    transient = drawn(page).strip()["service transient (10)"]
    assert list(transient) == [1.0, 3.0]
    assert transient[1.0] > transient[3.0]
    assert "not timed" not in text
    assert "gives no times for service-hang (counted in the faults table)" in text
    assert "service-transient (counted" not in text


def test_a_passing_run_says_so() -> None:
    given = report()
    given["invariants"]["side_effect_at_most_once"] = {
        "held": True,
        "violations": 0,
        "examples": [],
    }
    given["broken_invariants"] = []
    given["result"] = "passed"
    document = parsed(render_page(given))

    assert document.all("span", id="verdict")[0]["class"] == "verdict passed"
    assert "3 of 3" in "".join(document.text)


def test_the_page_reads_what_the_chaos_run_writes() -> None:
    findings = Findings(
        invariants={"lost": [], "stuck": ["order-9: Processing"]},
        evidence=Evidence(
            compensations={"started": 0},
            supervisor={"retries": 1},
            net_effects={},
            net_effect_orders=[],
            steps_after_compensation=[],
            step_latency_ms={},
        ),
        rejected=[],
    )
    crash = CrashEvent("services-kill", 3.0, datetime(2030, 1, 1, tzinfo=UTC), 4.5, 1.5)
    written = ChaosReport(
        orders=2,
        seed=1,
        submitted={"order": 2},
        final_states={"Processed": 1, "Processing": 1},
        findings=findings,
        crashes=[crash],
        service_faults={"stock": {"do": {"transient": 2}, "undo": {"transient": 0}}},
        series=[
            {"t": 0.0, "submitted": 0.0, "in_flight": 0.0, "finished": 0.0},
            {"t": 1.0, "submitted": 2.0, "in_flight": 1.0, "finished": 1.0},
        ],
        relay={"lost": 1},
        relay_events=[{"t": 1.5, "kind": "agent-response-lost", "messageId": "m-1"}],
        claims_abandoned=[],
        duration_seconds=5.0,
        settings={},
        service_fault_events=[
            {"t": 2.25, "kind": "service-transient", "service": "stock", "count": 2}
        ],
    ).to_json()
    page = render_page(written)
    document = parsed(page)
    drawing = drawn(page)

    assert [name for name in drawing.shapes if name.startswith("crash")] == ["crash-1"]
    assert "services-kill" in drawing.words()
    for key in ("submitted", "in_flight", "finished"):
        assert len(drawing.shapes[f"series-{key}"]) == 2
    assert drawing.strip() == {"answer lost (1)": {1.0: 1.0}, "service transient (2)": {2.0: 1.0}}
    assert written["faults_injected"]["transient"] == {"do": 2, "undo": 0, "total": 2}
    assert document.all("span", id="verdict")[0]["class"] == "verdict failed"
    assert "order-9: Processing" in "".join(document.text)


def test_the_page_is_written_beside_the_json_report(tmp_path: Path) -> None:
    given = report()

    written = write_page(given, tmp_path / "chaos.json")

    assert written == tmp_path / "chaos.html"
    assert written.read_text(encoding="utf-8") == render_page(given)
    assert write_page(given, tmp_path / "run.html") == tmp_path / "run.page.html"
    assert write_page(given, None) is None


def test_faults_are_listed_per_kind_and_operation_with_the_answers_after_their_deadline() -> None:
    """A compensation that fails (C2) is told apart from an action that fails (E8, E9), and the
    answers that came after their deadline (E2, E6) are counted, by where they were held."""
    given = report()
    given["service_faults_by_operation"] = {
        "payment": {"do": {"transient": 7, "permanent": 0}, "undo": {"transient": 2, "hang": 1}}
    }
    page = render_page(given)
    document = parsed(page)

    faults = [row["data-fault"] for row in document.all("tr") if "data-fault" in row]
    assert faults == ["transient", "devhost-kill", f"odd {INJECTED}"]
    table = table_text(page, "faults")
    assert table[0] == ["kind", "do", "undo", "total"]
    assert table[1:3] == [["transient", "7", "2", "9"], ["devhost-kill", "", "", "1"]]
    assert table_text(page, "past-deadline") == [
        ["answers", "do", "undo"],
        ["agent answers the relay held past their timeout", "2", "0"],
        ["services' answers delayed past their timeout", "0", "1"],
    ]
    text = " ".join(" ".join(document.text).split())
    assert "In all: 3," in text
    assert "service, operation transient permanent hang payment do 7 0 0 payment undo 2 0 1" in (
        text
    )
    assert "11 faults injected" in text  # the tile adds the totals: 9 + 1 + 1


def test_the_report_splits_every_fault_between_do_and_undo_and_counts_answers_past_deadline() -> (
    None
):
    """From the services' counts per operation and latency delays, and the relay's events:
    what hit an action (do), what hit a compensation (undo), and which answers came at least a
    timeout after their request (E2, E6, C2)."""
    findings = Findings(
        invariants={},
        evidence=Evidence({}, {}, {}, [], [], {}),
        rejected=[],
    )
    written = ChaosReport(
        orders=2,
        seed=1,
        submitted={"order": 2},
        final_states={},
        findings=findings,
        crashes=[CrashEvent("broker-kill", 3.0, datetime(2030, 1, 1, tzinfo=UTC), 4.0)],
        service_faults={
            "stock": {"do": {"transient": 3, "latency": 2}, "undo": {"hang": 1, "latency": 1}},
            "payment": {"do": {"transient": 1}, "undo": {"transient": 0}},
        },
        series=[],
        relay={"lost": 2, "late": 2, "reordered": 1},
        relay_events=[
            {"t": 1.0, "kind": "agent-response-lost", "messageId": "a", "operation": "do"},
            {"t": 1.5, "kind": "agent-response-lost", "messageId": "b", "operation": "undo"},
            {
                "t": 2.0,
                "kind": "agent-response-late",
                "messageId": "c",
                "operation": "do",
                "heldSeconds": 14.2,
            },
            {
                "t": 2.5,
                "kind": "agent-response-late",
                "messageId": "d",
                "operation": "undo",
                "heldSeconds": 4.0,
            },
            {"t": 3.0, "kind": "agent-response-reordered", "messageId": "e", "operation": None},
        ],
        claims_abandoned=[],
        duration_seconds=5.0,
        settings={},
        service_latencies={"stock": {"do": [0.5, 12.0], "undo": [11.0]}},
        deadlines={"do": 10.0, "undo": 10.0},
    )

    assert written.faults_injected() == {
        "agent-response-late": {"do": 1, "undo": 1, "total": 2},
        "agent-response-lost": {"do": 1, "undo": 1, "total": 2},
        "agent-response-reordered": {"total": 1},
        "broker-kill": {"total": 1},
        "hang": {"do": 0, "undo": 1, "total": 1},
        "latency": {"do": 2, "undo": 1, "total": 3},
        "transient": {"do": 4, "undo": 0, "total": 4},
    }
    assert written.answers_past_deadline() == {
        "agent-response-late": {"do": 1, "undo": 0},
        "latency": {"do": 1, "undo": 1},
        "total": 3,
    }
    document = written.to_json()
    assert document["service_faults"] == {
        "stock": {"transient": 3, "latency": 3, "hang": 1},
        "payment": {"transient": 1},
    }
    assert document["faults_injected"] == written.faults_injected()
    assert "transient 4 (do 4, undo 0)" in written.render()
    assert "Answers past their deadline: 3" in written.render()
