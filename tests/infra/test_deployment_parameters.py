"""docs/deployment.md names every parameter a user can set, with its azd environment
variable and its default: the list under "Parameters" pairs exactly the variables
infra/main.parameters.json maps to main.bicep's parameters, and the sentence after it names
every other parameter of main.bicep. azd sets the AZURE_* ones itself."""

from __future__ import annotations

import json
import re

from tests.infra.bicep import INFRA, ROOT, module

PAGE = ROOT / "docs" / "deployment.md"
HEADING = "## Parameters"
ALSO_TAKES = "`main.bicep` also takes"
MAPPED = re.compile(r"^\$\{(?P<variable>[A-Z_]+)(?:=(?P<default>[^}]*))?\}$")
# "- `A`, `B` → `a`, `b` (default `0`): what they mean", one item per group of parameters.
ITEM = re.compile(
    r"^- (?P<variables>`[A-Z_]+`(?:,\s+`[A-Z_]+`)*) → (?P<parameters>`\w+`(?:,\s+`\w+`)*)"
    r" \(default (?P<default>[^)]+)\): ",
    re.MULTILINE,
)


def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def parameter_items() -> list[tuple[str, str, str]]:
    """(variables, parameters, default) of each item of the page's parameter list."""
    text = page()
    start = text.index(HEADING)
    section = text[start : text.index(ALSO_TAKES, start)]
    items = [(m["variables"], m["parameters"], m["default"]) for m in ITEM.finditer(section)]
    assert items, "docs/deployment.md lists no parameter"
    return items


def mapped_parameters() -> dict[str, tuple[str, str | None]]:
    """main.parameters.json: parameter -> (azd environment variable, its default), without
    the variables azd sets itself."""
    document = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))
    mapped = {}
    for parameter, entry in document["parameters"].items():
        match = MAPPED.match(entry["value"])
        assert match is not None, f"{parameter}: {entry['value']!r} is no azd variable"
        if not match["variable"].startswith("AZURE_"):
            mapped[parameter] = (match["variable"], match["default"])
    return mapped


def bicep_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_the_list_pairs_each_variable_with_its_parameter_and_default():
    documented: dict[str, tuple[str, str]] = {}
    for variables, parameters, default in parameter_items():
        names = re.findall(r"`([A-Z_]+)`", variables)
        params = re.findall(r"`(\w+)`", parameters)
        assert len(names) == len(params), f"{variables} | {parameters}"
        documented.update(
            {param: (name, default) for name, param in zip(names, params, strict=True)}
        )
    mapped = mapped_parameters()
    assert set(documented) == set(mapped), "the page and main.parameters.json differ"
    declared = module("main")["parameters"]
    for parameter, (variable, default) in sorted(mapped.items()):
        assert documented[parameter][0] == variable, parameter
        if default is None:
            assert documented[parameter][1] in ("none", "empty"), parameter
        else:
            assert documented[parameter][1] == f"`{default}`", parameter
            assert bicep_text(declared[parameter]["default"]) == default, parameter


def test_every_other_parameter_of_main_bicep_is_named_with_its_default():
    text = page()
    start = text.index(ALSO_TAKES) + len(ALSO_TAKES)
    paragraph = text[start : text.index("\n\n", start)]
    named = dict(re.findall(r"`(\w+)`(?:\s\((\w+))?", paragraph))
    declared = module("main")["parameters"]
    azd_sets = {"environmentName", "location", "principalId", "principalType"}
    assert set(named) == set(declared) - set(mapped_parameters()) - azd_sets
    for parameter, default in sorted(named.items()):
        assert default, f"{parameter}: no default given"
        assert bicep_text(declared[parameter]["default"]) == default, parameter
