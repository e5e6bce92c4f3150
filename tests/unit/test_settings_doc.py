"""docs/settings.md is what config.py's declarations make, so the reference has one source.

The page lists every declared setting with a default its parser reads back and its meaning,
in the order config.py declares them, then the host's and connections' settings that
config.py does not declare: exactly those of local.settings.sample.json.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

from config import declarations
from tools.settings_doc import COMMAND, HOST_SETTINGS, default_text, render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "settings.md"
SAMPLE = ROOT / "local.settings.sample.json"
LISTED = re.compile(r"^- `(?P<name>[^`]+)` \((?:default `(?P<default>[^`]*)`|no default)\): ", re.M)


def test_the_settings_page_is_what_the_declarations_make() -> None:
    made = render()
    written = PAGE.read_text(encoding="utf-8")
    difference = "".join(
        difflib.unified_diff(
            written.splitlines(keepends=True),
            made.splitlines(keepends=True),
            "docs/settings.md",
            "what config.py makes",
        )
    )
    assert written == made, f"docs/settings.md is out of date: run `{COMMAND}`\n{difference}"


def test_the_generated_page_lists_every_declaration_with_a_default_it_reads_back() -> None:
    listed = {m["name"]: m["default"] for m in LISTED.finditer(render())}
    for declared in declarations():
        assert declared.name in listed, declared.name
        text = listed[declared.name]
        assert text == default_text(declared), declared.name
        if text is None:
            assert not declared.default, f"{declared.name}: its default is not shown"
        else:
            assert declared.parse(text, declared.name) == declared.default, declared.name
    assert list(listed)[: len(declarations())] == [d.name for d in declarations()]


def test_the_host_settings_are_the_samples_that_config_does_not_declare() -> None:
    sample = json.loads(SAMPLE.read_text(encoding="utf-8"))["Values"]
    undeclared = set(sample) - {declared.name for declared in declarations()}
    assert {name for name, _ in HOST_SETTINGS} == undeclared
    assert all(meaning.strip() for _, meaning in HOST_SETTINGS)
