"""Reading the Bicep of infra/ for the tests: each file parsed once with pycep-parser.

pycep turns a Bicep file into JSON: `parameters`, `variables`, `resources`, `modules` and
`outputs`, each expression as a tree of `function` and `operator` nodes. A reference to a
symbol and a string literal are both plain strings there (`'cosmos'` and `cosmos` read the
same), so `resolve` treats a string that names a variable of the file as that variable.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from pycep import BicepParser

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
APP = INFRA / "app"
BICEP_FILES = sorted(INFRA.rglob("*.bicep"))

Json = Any


@cache
def _parser() -> BicepParser:
    return BicepParser()


@cache
def parse(path: Path) -> Json:
    return _parser().parse(file_path=path)


def module(name: str) -> Json:
    """The parsed `infra/app/<name>.bicep`, or `infra/main.bicep` for "main"."""
    return parse(INFRA / "main.bicep" if name == "main" else APP / f"{name}.bicep")


def body(resource: Json) -> Json:
    """A resource's or module's object, without its loop or deploy condition."""
    config = resource["config"]
    while isinstance(config, dict) and ("loop_type" in config or "condition" in config):
        config = config["config"]
    return config


def condition(resource: Json) -> Json:
    """The deploy condition of a resource or module (None when always deployed)."""
    return resource["config"].get("condition")


def loop_array(resource: Json) -> str | None:
    """The array a resource loop runs over (None for a single resource)."""
    loop = resource["config"].get("loop_type")
    return None if loop is None else str(loop["detail"]["array_name"])


def resources_of_type(doc: Json, type_: str) -> dict[str, Json]:
    return {name: each for name, each in doc["resources"].items() if each["type"] == type_}


def resolve(doc: Json, value: Json) -> Json:
    """A variable's value for a string naming one; any other value as it is."""
    if isinstance(value, str) and value in doc.get("variables", {}):
        return resolve(doc, doc["variables"][value]["value"])
    return value


def elements(doc: Json, value: Json) -> list[Json]:
    """The items of an array expression: a literal array, or a `concat` of arrays, resolved."""
    value = resolve(doc, value)
    if isinstance(value, dict) and value.get("function", {}).get("type") == "concat":
        parameters = value["function"]["parameters"]
        return [item for key in sorted(parameters) for item in elements(doc, parameters[key])]
    assert isinstance(value, list), f"expected an array, got {value!r}"
    return value


def alternatives(doc: Json, value: Json) -> list[Json]:
    """The values an expression may take: both branches of a condition, resolved."""
    value = resolve(doc, value)
    if isinstance(value, dict) and value.get("operator", {}).get("type") == "conditional":
        operands = value["operator"]["operands"]
        return alternatives(doc, operands["true_value"]) + alternatives(
            doc, operands["false_value"]
        )
    return [value]


def function_call(value: Json, name: str) -> Json:
    """The parameters of a call of function `name` (pycep's snake_case name), else fail."""
    assert isinstance(value, dict), f"expected a call of {name}, got {value!r}"
    assert "function" in value, f"expected a call of {name}, got {value!r}"
    call = value["function"]
    assert call["type"] == name, f"expected a call of {name}, got {call['type']}"
    return call["parameters"]


def accessor_path(value: Json) -> list[Json]:
    """`a.b.c` as ["a", "b", "c"]; the last element may be any other expression."""
    path: list[Json] = []
    while isinstance(value, dict) and value.get("operator", {}).get("type") in (
        "property_accessor",
        "safe_property_accessor",
    ):
        operands = value["operator"]["operands"]
        path.append(operands["operand_1"])
        value = operands["operand_2"]
    path.append(value)
    return path


def load_json_path(doc_path: Path, value: Json) -> Path:
    """The file a `loadJsonContent(...)` call of the Bicep file at `doc_path` reads."""
    parameters = function_call(value, "load_json_content")
    return (doc_path.parent / parameters["file_path"]).resolve()


def load_json(doc_path: Path, value: Json) -> Json:
    return json.loads(load_json_path(doc_path, value).read_text(encoding="utf-8"))
