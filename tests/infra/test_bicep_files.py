"""The azd project is complete: every Bicep file parses, every module and parameter it names
exists, and the layout is the Flex Consumption quickstarts' (azure.yaml, infra/main.bicep at
subscription scope, main.parameters.json, abbreviations.json, infra/app/*.bicep)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.infra.azure_yaml import hook
from tests.infra.bicep import APP, BICEP_FILES, INFRA, ROOT, body, module, parse
from tools.smoke.command import parser


def test_the_layout_is_the_quickstarts():
    for path in ("azure.yaml", "infra/main.bicep", "infra/main.parameters.json"):
        assert (ROOT / path).is_file(), path
    assert json.loads((INFRA / "abbreviations.json").read_text(encoding="utf-8"))
    assert sorted(APP.glob("*.bicep")), "no module in infra/app"
    assert module("main")["globals"]["scope"]["value"] == "subscription"


@pytest.mark.parametrize("path", BICEP_FILES, ids=lambda path: str(path.relative_to(INFRA)))
def test_every_bicep_file_parses(path: Path):
    parsed = parse(path)
    assert parsed.get("resources") or parsed.get("modules"), f"{path} declares nothing"


def test_pycep_parser_is_the_pinned_one():
    pins = (ROOT / "requirements-dev.txt").read_text(encoding="utf-8")
    assert f"pycep-parser=={version('pycep-parser')}" in pins


def test_every_module_main_uses_exists_and_gets_only_parameters_it_declares():
    main = module("main")
    assert main["modules"]
    for name, each in main["modules"].items():
        path = INFRA / each["detail"]["path"]
        assert path.is_file(), f"module {name}: {path} is missing"
        declared = set(parse(path)["parameters"])
        passed = set(body(each)["params"])
        assert passed <= declared, f"module {name} gets undeclared {passed - declared}"
        required = {p for p, spec in parse(path)["parameters"].items() if spec["default"] is None}
        assert required <= passed, f"module {name} misses required {required - passed}"


def test_main_parameters_json_sets_only_parameters_of_main_bicep():
    document = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))
    assert set(document["parameters"]) <= set(module("main")["parameters"])
    for name in ("environmentName", "location", "principalId"):
        assert name in document["parameters"], name


def test_azure_yaml_deploys_this_folder_to_the_site_tagged_api():
    text = (ROOT / "azure.yaml").read_text(encoding="utf-8")
    service = re.search(r"^services:\n  (\w+):\n((?:    .*\n)+)", text, re.MULTILINE)
    assert service is not None
    assert service.group(1) == "api"
    fields = dict(re.findall(r"^    (\w+): (.+)$", service.group(2), re.MULTILINE))
    assert fields == {"project": ".", "language": "python", "host": "function"}
    site = body(module("function")["resources"]["site"])
    assert site["tags"]["function"]["parameters"]["arg_2"] == {"'azd-service-name'": "api"}
    assert (ROOT / fields["project"] / "requirements.txt").is_file()  # remote build needs it


def test_azure_yaml_runs_the_smoke_test_after_every_deployment_with_the_outputs_it_reads():
    """The postdeploy hook runs `python -m tools.smoke` on either shell, and the command finds
    the namespace, the orders queue and its reply queue in main.bicep's outputs, which azd
    hands to its hooks as environment variables."""
    shells = hook("postdeploy")
    assert {(os, shell) for os, (shell, _) in shells.items()} == {
        ("posix", "sh"),
        ("windows", "pwsh"),
    }
    for _, run in shells.values():
        assert "-m tools.smoke" in run

    # Each output's value stands for its name: the options that took their default from the
    # deployment's outputs show which output they read.
    outputs = {name: name for name in module("main")["outputs"]}
    args = parser(outputs).parse_args([])
    assert args.namespace == "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE"
    assert args.reply_queue == "SMOKE_REPLY_QUEUE"
    assert args.orders_queue == "ORDERS_QUEUE"


def test_azure_yaml_runs_the_replay_gate_before_every_deployment_unless_skipped_c7():
    """The predeploy hook runs the replay gate on the recorded histories, then on the instances
    in flight when the deployment names a scheduler, and stops the deployment when it fails;
    SKIP_REPLAY_GATE=1 skips it and says what was not checked. main.bicep outputs what the
    hook reads."""
    shells = hook("predeploy")
    assert {(os, shell) for os, (shell, _) in shells.items()} == {
        ("posix", "sh"),
        ("windows", "pwsh"),
    }
    for _, run in shells.values():
        assert "-m tools.replay" in run
        assert "SKIP_REPLAY_GATE" in run
    outputs = module("main")["outputs"]
    assert {"DURABLE_TASK_SCHEDULER_ENDPOINT", "TASKHUB_NAME"} <= set(outputs)

    script = shells["posix"][1]
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SKIP_REPLAY_GATE", "DURABLE_TASK_SCHEDULER_ENDPOINT")
    }
    ran = subprocess.run(
        ["sh", "-c", script], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert " instances replay" in ran.stdout
    assert "no instance in flight was read" in ran.stdout
    skipped = subprocess.run(
        ["sh", "-c", script],
        cwd=ROOT,
        env={**environ, "SKIP_REPLAY_GATE": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert skipped.returncode == 0
    assert "replay gate skipped" in skipped.stdout
