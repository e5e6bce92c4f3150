"""The README stays true to the rules and to the repository a user clones.

Every rule id that docs/pattern.md defines has a row in the README's "Rule → code" table,
every file and test that table names exists, every invariant the chaos run checks has a row
in the README's table of them, and every relative link of README.md leads to a file or folder
in the repository (never outside it, where a clone has nothing).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from tools.chaos.invariants import check
from tools.demo.client import Workload

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PATTERN = ROOT / "docs" / "pattern.md"
RULE_TABLE_HEADING = "## Rule → code"
CHAOS_HEADING = "## make chaos"
INVARIANTS_HEADER = ["invariant", "evidence"]

RULE_DEFINITION = re.compile(r"^- ([A-Z]\d+)\. ", re.MULTILINE)
RULE_ID = re.compile(r"\b([SDEURC]\d+)\b")
FENCED_BLOCK = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
LINK_DEFINITION = re.compile(r"^\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
# A repository path in backticks: a file with an extension, optionally `::test_name`, or
# a folder ending in `/`.
NAMED_PATH = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:py|json|md|toml)(?:::\w+)?|(?:[\w.-]+/)+)`")
CODE_SPAN = re.compile(r"`([^`]+)`")


def defined_rule_ids() -> list[str]:
    return RULE_DEFINITION.findall(PATTERN.read_text(encoding="utf-8"))


def readme_section(heading: str) -> str:
    """The README's section under ``heading``, up to the next one of its level."""
    text = README.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end == -1 else text[start:end]


def rule_table_section() -> str:
    return readme_section(RULE_TABLE_HEADING)


def tables(text: str) -> list[list[list[str]]]:
    """Every table in ``text``: its rows, header and separator first, split into cells."""
    found: list[list[list[str]]] = []
    previous_was_row = False
    for line in text.splitlines():
        is_row = line.startswith("|")
        if is_row:
            if not previous_was_row:
                found.append([])
            found[-1].append([cell.strip() for cell in line.strip().strip("|").split("|")])
        previous_was_row = is_row
    return found


def rule_table_rows() -> list[list[str]]:
    """The table's body rows, split into cells (header and separator left out)."""
    return [row for table in tables(rule_table_section()) for row in table[2:]]


def chaos_invariant_rows() -> list[list[str]]:
    """The body rows of the "make chaos" section's table of invariants."""
    matching = [t for t in tables(readme_section(CHAOS_HEADING)) if t[0] == INVARIANTS_HEADER]
    assert len(matching) == 1, f"README '{CHAOS_HEADING}' needs one table {INVARIANTS_HEADER}"
    return matching[0][2:]


def checked_invariants(tmp_path: Path) -> list[str]:
    """The names of the invariants `chaos.invariants.check` reports, as a run reports them."""
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


def rule_column_ids() -> set[str]:
    """The rule ids the table's first column names (a row may group several)."""
    return {rule_id for row in rule_table_rows() for rule_id in RULE_ID.findall(row[0])}


@cache
def defined_tests(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    )


def test_pattern_defines_the_rule_families_the_readme_cites() -> None:
    """The ids come from docs/pattern.md itself; an empty or renamed digest must not pass."""
    families = {rule_id[0] for rule_id in defined_rule_ids()}
    assert families == set("SDEURC")


def test_every_rule_of_the_pattern_has_a_row_in_the_rule_table() -> None:
    in_rule_column = rule_column_ids()
    missing = [rule_id for rule_id in defined_rule_ids() if rule_id not in in_rule_column]
    assert not missing, f"README '{RULE_TABLE_HEADING}' has no row for {missing}"


def test_the_rule_table_names_only_rules_the_pattern_defines() -> None:
    unknown = rule_column_ids() - set(defined_rule_ids())
    assert not unknown, (
        f"README '{RULE_TABLE_HEADING}' names rules docs/pattern.md lacks: {unknown}"
    )


def test_every_row_names_code_and_proof() -> None:
    incomplete = [row[0] for row in rule_table_rows() if len(row) != 3 or not all(row)]
    assert not incomplete, f"rows without code or proof: {incomplete}"


def test_every_file_and_test_the_rule_table_names_exists() -> None:
    broken: list[str] = []
    for named in NAMED_PATH.findall(rule_table_section()):
        path_text, _, test_name = named.partition("::")
        path = ROOT / path_text
        if not path.exists():
            broken.append(f"{named}: no such file or folder")
        elif test_name and test_name not in defined_tests(path):
            broken.append(f"{named}: no such test in {path_text}")
    assert not broken, "README rule table names what is not there:\n" + "\n".join(broken)


def test_every_relative_link_of_the_readme_leads_into_the_repository() -> None:
    text = FENCED_BLOCK.sub("", README.read_text(encoding="utf-8"))
    targets = INLINE_LINK.findall(text) + LINK_DEFINITION.findall(text)
    assert targets, "README.md should link its rules and contracts"
    broken: list[str] = []
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = (README.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            broken.append(target)
    assert not broken, f"README.md links to what a clone does not have: {broken}"


def test_every_invariant_the_chaos_run_checks_has_a_row_in_the_readme(tmp_path: Path) -> None:
    """The README's table says what `make chaos` proves (C1-C10): one row per invariant,
    named first in its row, and the figures' count of invariants held is their number."""
    checked = checked_invariants(tmp_path)
    named = [CODE_SPAN.findall(row[0])[0] for row in chaos_invariant_rows()]

    assert checked, "chaos.invariants.check reports no invariant"
    missing = [name for name in checked if name not in named]
    assert not missing, f"README '{CHAOS_HEADING}' invariants table has no row for {missing}"
    unknown = [name for name in named if name not in checked]
    assert not unknown, f"README '{CHAOS_HEADING}' names invariants the run lacks: {unknown}"
    assert f"all {len(checked)} held" in readme_section(CHAOS_HEADING)
