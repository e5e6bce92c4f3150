"""The README stays true to the rules and to the repository a user clones.

Every rule id that docs/pattern.md defines has a row in the README's "Rule → code" table,
every file and test that table names exists, and every relative link of README.md leads to
a file or folder in the repository (never outside it, where a clone has nothing).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PATTERN = ROOT / "docs" / "pattern.md"
RULE_TABLE_HEADING = "## Rule → code"

RULE_DEFINITION = re.compile(r"^- ([A-Z]\d+)\. ", re.MULTILINE)
RULE_ID = re.compile(r"\b([SDEURC]\d+)\b")
FENCED_BLOCK = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
LINK_DEFINITION = re.compile(r"^\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
# A repository path in backticks: a file with an extension, optionally `::test_name`, or
# a folder ending in `/`.
NAMED_PATH = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:py|json|md|toml)(?:::\w+)?|(?:[\w.-]+/)+)`")


def defined_rule_ids() -> list[str]:
    return RULE_DEFINITION.findall(PATTERN.read_text(encoding="utf-8"))


def rule_table_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(RULE_TABLE_HEADING)
    end = text.find("\n## ", start + len(RULE_TABLE_HEADING))
    return text[start:] if end == -1 else text[start:end]


def rule_table_rows() -> list[list[str]]:
    """The table's body rows, split into cells (header and separator left out)."""
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in rule_table_section().splitlines()
        if line.startswith("|")
    ]
    return rows[2:]


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
