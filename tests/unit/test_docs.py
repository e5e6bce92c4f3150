"""The docs stay true to the rules and to the repository a user clones.

- docs/rules.md has one row per rule id docs/pattern.md defines, and no other; each cell
  names code or tests only, and every `file.py::name` it names is a file that defines that
  function, class, method or constant (read with `ast`, never imported).
- docs/chaos.md has one row per invariant the chaos run checks, named as the run names it,
  with the code that checks it and the tests that prove it.
- No table of README.md or docs/ holds prose: its cells are code spans (the copies of the
  spec, pattern.md and contracts.md, aside).
- README.md is a ten-minute read: at most 200 lines, the two commands shown, no dated
  line, and its map names every top-level entry of the repository.
- Every relative link of README.md and docs/*.md leads to a file or folder in the
  repository (never outside it, where a clone has nothing).
"""

from __future__ import annotations

import ast
import re
import subprocess
from functools import cache
from pathlib import Path

from tools.chaos.invariants import check
from tools.demo.client import Workload

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PATTERN = DOCS / "pattern.md"
RULES = DOCS / "rules.md"
CHAOS = DOCS / "chaos.md"
SPEC_COPIES = {"pattern.md", "contracts.md"}
RULE_TABLE_HEADING = "## Rule → code"
RULE_TABLE_HEADER = ["rule", "implemented in", "proved by"]
INVARIANTS_HEADING = "## Invariants"
INVARIANTS_HEADER = ["invariant", "checked by", "proved by"]
MAP_HEADING = "## What ships and what is tooling"
README_MAX_LINES = 200

RULE_DEFINITION = re.compile(r"^- ([A-Z]\d+)\. ", re.MULTILINE)
RULE_ID = re.compile(r"^[SDEURC]\d+$")
FENCED_BLOCK = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
LINK_DEFINITION = re.compile(r"^\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
CODE_SPAN = re.compile(r"`([^`]+)`")
# What may stand between the code spans of a cell.
SEPARATORS = re.compile(r"[\s,;]|<br>")
# A file of the repository, optionally with the name it defines: `path/file.py::name`,
# `path/file.py::Class.method`, `host.json`, `infra/app/alerts.bicep`.
NAMED_CODE = re.compile(r"^(?P<path>(?:[\w.-]+/)*[\w.-]+\.\w+)(?:::(?P<name>\w+(?:\.\w+)?))?$")
TEST_ID = re.compile(r"^(?:devhost/)?tests/(?:[\w.-]+/)*test_\w+\.py::test_\w+$")
# A date, but not an ISO timestamp of an example (2030-01-01T00:00:00Z) nor an API version
# (api-version=2024-04-01).
DATE = re.compile(r"(?<![=\w-])20\d\d-[01]\d-[0-3]\d\b(?!T)")
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.MULTILINE)
MAP_ENTRY = re.compile(r"^- (?P<names>`[^`]+`(?:(?:,| and) `[^`]+`)*) — ", re.MULTILINE)


def defined_rule_ids() -> list[str]:
    return RULE_DEFINITION.findall(PATTERN.read_text(encoding="utf-8"))


def section(path: Path, heading: str) -> str:
    """The text of ``path`` under ``heading``, up to the next heading of its level."""
    text = path.read_text(encoding="utf-8")
    assert heading in text, f"{path.relative_to(ROOT)} has no section '{heading}'"
    start = text.index(heading)
    level = heading.split(" ", 1)[0]
    end = text.find(f"\n{level} ", start + len(heading))
    return text[start:] if end == -1 else text[start:end]


def tables(text: str) -> list[list[list[str]]]:
    """Every table in ``text``: its rows, header and separator first, split into cells."""
    found: list[list[list[str]]] = []
    previous_was_row = False
    for line in FENCED_BLOCK.sub("", text).splitlines():
        is_row = line.startswith("|")
        if is_row:
            if not previous_was_row:
                found.append([])
            found[-1].append([cell.strip() for cell in line.strip().strip("|").split("|")])
        previous_was_row = is_row
    return found


def table_under(path: Path, heading: str, header: list[str]) -> list[list[str]]:
    """The body rows of the one table with ``header`` in the section ``heading``."""
    matching = [t for t in tables(section(path, heading)) if t[0] == header]
    assert len(matching) == 1, f"{path.relative_to(ROOT)} '{heading}' needs one table {header}"
    return matching[0][2:]


def rule_rows() -> list[list[str]]:
    return table_under(RULES, RULE_TABLE_HEADING, RULE_TABLE_HEADER)


def invariant_rows() -> list[list[str]]:
    return table_under(CHAOS, INVARIANTS_HEADING, INVARIANTS_HEADER)


def only_code(cell: str) -> bool:
    """Whether a cell holds code spans and nothing else."""
    return bool(CODE_SPAN.search(cell)) and not SEPARATORS.sub("", CODE_SPAN.sub("", cell))


def doc_pages() -> list[Path]:
    """README.md and the docs pages this project writes (not its copies of the spec)."""
    return [README, *(page for page in sorted(DOCS.glob("*.md")) if page.name not in SPEC_COPIES)]


@cache
def defined_names(path: Path) -> frozenset[str]:
    """What a Python file defines at its top level: functions, classes and constants, and
    each class's own functions as ``Class.name``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            names.update(
                f"{node.name}.{member.name}"
                for member in node.body
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
            )
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(names)


def missing_code(named: str) -> str | None:
    """Why ``named`` (a cell's code span) is not in the repository, or None when it is."""
    match = NAMED_CODE.match(named)
    if match is None:
        return f"{named}: neither a file nor file::name"
    path = ROOT / match["path"]
    if not path.is_file():
        return f"{named}: no such file"
    if path.suffix == ".py":
        if match["name"] is None:
            return f"{named}: name the function, class or test of the file (file.py::name)"
        if match["name"] not in defined_names(path):
            return f"{named}: {match['path']} defines no {match['name']}"
    elif match["name"] is not None:
        return f"{named}: only a Python file defines names"
    return None


# --- docs/rules.md --------------------------------------------------------------------------


def test_pattern_defines_the_rule_families_the_docs_cite() -> None:
    """The ids come from docs/pattern.md itself; an empty or renamed digest must not pass."""
    families = {rule_id[0] for rule_id in defined_rule_ids()}
    assert families == set("SDEURC")


def test_every_rule_of_the_pattern_has_one_row_and_no_row_names_another() -> None:
    in_rule_column = [row[0] for row in rule_rows()]
    malformed = [cell for cell in in_rule_column if not RULE_ID.match(cell)]
    assert not malformed, f"docs/rules.md: a rule cell is one rule id, not {malformed}"
    repeated = sorted({rule for rule in in_rule_column if in_rule_column.count(rule) > 1})
    assert not repeated, f"docs/rules.md has more than one row for {repeated}"
    defined = defined_rule_ids()
    missing = [rule for rule in defined if rule not in in_rule_column]
    assert not missing, f"docs/rules.md has no row for {missing}"
    unknown = [rule for rule in in_rule_column if rule not in defined]
    assert not unknown, f"docs/rules.md names rules docs/pattern.md lacks: {unknown}"


def test_every_row_names_code_and_tests_and_nothing_else() -> None:
    bad = [
        f"{row[0]}: {cell}"
        for row in rule_rows()
        for cell in (row[1:] if len(row) == 3 else ["three cells, not " + str(len(row))])
        if not only_code(cell)
    ]
    assert not bad, "docs/rules.md cells with anything but code spans:\n" + "\n".join(bad)
    not_tests = [
        f"{row[0]}: {named}"
        for row in rule_rows()
        for named in CODE_SPAN.findall(row[2])
        if not TEST_ID.match(named)
    ]
    assert not not_tests, "'proved by' names what is no test id:\n" + "\n".join(not_tests)


def test_every_file_function_and_test_the_rule_table_names_exists() -> None:
    broken = [
        f"{row[0]}: {problem}"
        for row in rule_rows()
        for cell in row[1:]
        for named in CODE_SPAN.findall(cell)
        if (problem := missing_code(named)) is not None
    ]
    assert not broken, "docs/rules.md names what is not there:\n" + "\n".join(broken)


# --- docs/chaos.md --------------------------------------------------------------------------


def checked_invariants(tmp_path: Path) -> list[str]:
    """The names of the invariants `tools.chaos.invariants.check` reports, as a run does."""
    findings = check(
        {},
        Workload([], []),
        tmp_path / "no-ledger.jsonl",
        replies=[],
        alerts=[],
        dead_letters=[],
        max_failures=3,
        steps=("reserve-stock",),
    )
    return list(findings.invariants)


def test_every_invariant_the_chaos_run_checks_has_a_row(tmp_path: Path) -> None:
    """docs/chaos.md says what `make chaos` proves (C1-C10): one row per invariant, named as
    the run names it in its first cell, with the code that checks it and the tests."""
    checked = checked_invariants(tmp_path)
    rows = invariant_rows()
    named = [CODE_SPAN.findall(row[0])[0] if CODE_SPAN.search(row[0]) else row[0] for row in rows]

    assert checked, "tools.chaos.invariants.check reports no invariant"
    missing = [name for name in checked if name not in named]
    assert not missing, f"docs/chaos.md invariants table has no row for {missing}"
    unknown = [name for name in named if name not in checked]
    assert not unknown, f"docs/chaos.md names invariants the run lacks: {unknown}"
    broken = [
        f"{row[0]}: {problem}"
        for row in rows
        for cell in row[1:]
        for named_code in CODE_SPAN.findall(cell)
        if (problem := missing_code(named_code)) is not None
    ]
    assert not broken, "docs/chaos.md names what is not there:\n" + "\n".join(broken)
    not_tests = [named for row in rows for named in CODE_SPAN.findall(row[2])]
    assert all(TEST_ID.match(named) for named in not_tests), not_tests


# --- every page -----------------------------------------------------------------------------


def test_no_table_cell_of_the_docs_holds_prose() -> None:
    """A table maps names to code and tests; what needs words goes in a list or a paragraph."""
    bad = [
        f"{page.relative_to(ROOT)}: {cell}"
        for page in doc_pages()
        for table in tables(page.read_text(encoding="utf-8"))
        for row in table[2:]
        for cell in row
        if not (only_code(cell) or RULE_ID.match(cell))
    ]
    assert not bad, "table cells that are not code spans:\n" + "\n".join(bad)


def anchors(page: Path) -> set[str]:
    """The anchors a Markdown renderer gives the headings of ``page``, as GitHub makes them:
    lower case, punctuation dropped, spaces to hyphens."""
    text = FENCED_BLOCK.sub("", page.read_text(encoding="utf-8"))
    return {
        re.sub(r"[^\w\- ]", "", heading.replace("`", "")).strip().lower().replace(" ", "-")
        for heading in HEADING.findall(text)
    }


def test_every_relative_link_of_the_docs_leads_into_the_repository() -> None:
    """A file or folder of the repository, and, for a Markdown page, one of its headings."""
    broken: list[str] = []
    for page in doc_pages():
        text = FENCED_BLOCK.sub("", page.read_text(encoding="utf-8"))
        for target in INLINE_LINK.findall(text) + LINK_DEFINITION.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.is_relative_to(ROOT) or not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and (path.suffix != ".md" or anchor not in anchors(path)):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "links to what a clone does not have:\n" + "\n".join(broken)


def test_no_doc_carries_a_date() -> None:
    """The docs say what is true now; a dated figure is a lab notebook's."""
    pages = [*doc_pages(), ROOT / "tools" / "bench" / "README.md", ROOT / "devhost" / "README.md"]
    dated = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
        for page in pages
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if DATE.search(line)
    ]
    assert not dated, "dated lines:\n" + "\n".join(dated)


# --- README.md ------------------------------------------------------------------------------


def test_the_readme_is_short_and_shows_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, "README.md: at most 200 lines"
    assert "make demo" in text
    assert "make test" in text


def top_level_entries() -> set[str]:
    """The first path component of every file git tracks: what a clone's root holds."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
    ).stdout.splitlines()
    return {path.split("/", 1)[0] + "/" if "/" in path else path for path in listed if path.strip()}


def test_the_readme_map_names_every_top_level_entry_and_only_those() -> None:
    names = [
        name
        for entry in MAP_ENTRY.finditer(section(README, MAP_HEADING))
        for name in CODE_SPAN.findall(entry["names"])
    ]
    entries = top_level_entries()
    missing = sorted(entries - set(names))
    assert not missing, f"README '{MAP_HEADING}' does not name {missing}"
    unknown = sorted(set(names) - entries)
    assert not unknown, f"README '{MAP_HEADING}' names what the root lacks: {unknown}"
