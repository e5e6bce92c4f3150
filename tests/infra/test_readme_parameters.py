"""The README's "Deploy to Azure" names every parameter a user can set, with its azd
environment variable and its default: the table pairs exactly the variables
infra/main.parameters.json maps to main.bicep's parameters, and the sentence after it names
every other parameter of main.bicep. azd sets the AZURE_* ones itself."""

from __future__ import annotations

import json
import re

from tests.infra.bicep import INFRA, ROOT, module

TABLE_INTRO = "The parameters (`azd env set NAME value`, then `azd provision`):"
ALSO_TAKES = "`main.bicep` also takes"
MAPPED = re.compile(r"^\$\{(?P<variable>[A-Z_]+)(?:=(?P<default>[^}]*))?\}$")


def readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def table_rows() -> list[list[str]]:
    """The cells of each row of the README's parameter table."""
    text = readme()
    lines = text[text.index(TABLE_INTRO) + len(TABLE_INTRO) :].strip().splitlines()
    rows = []
    for line in lines[2:]:  # the header and its rule
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    assert rows, "the README's parameter table is empty"
    return rows


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


def test_the_table_pairs_each_variable_with_its_parameter_and_default():
    documented: dict[str, tuple[str, str]] = {}
    for variables, parameters, default, _ in table_rows():
        names = re.findall(r"`([A-Z_]+)`", variables)
        params = re.findall(r"`(\w+)`", parameters)
        assert len(names) == len(params), f"{variables} | {parameters}"
        documented.update(
            {param: (name, default) for name, param in zip(names, params, strict=True)}
        )
    mapped = mapped_parameters()
    assert set(documented) == set(mapped), "the table and main.parameters.json differ"
    declared = module("main")["parameters"]
    for parameter, (variable, default) in sorted(mapped.items()):
        assert documented[parameter][0] == variable, parameter
        if default is None:
            assert documented[parameter][1] in ("none", "empty"), parameter
        else:
            assert documented[parameter][1] == f"`{default}`", parameter
            assert bicep_text(declared[parameter]["default"]) == default, parameter


def test_every_other_parameter_of_main_bicep_is_named_with_its_default():
    text = readme()
    start = text.index(ALSO_TAKES) + len(ALSO_TAKES)
    paragraph = text[start : text.index("\n\n", start)]
    named = dict(re.findall(r"`(\w+)`(?:\s\((\w+))?", paragraph))
    declared = module("main")["parameters"]
    azd_sets = {"environmentName", "location", "principalId", "principalType"}
    assert set(named) == set(declared) - set(mapped_parameters()) - azd_sets
    for parameter, default in sorted(named.items()):
        assert default, f"{parameter}: no default given"
        assert bicep_text(declared[parameter]["default"]) == default, parameter
