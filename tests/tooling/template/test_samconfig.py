"""samconfig.toml deploys each template as its own stack: the central stack's environment
(docs/organization.md) builds fleet.yaml, never deploys it unbuilt (its layers would miss
their packages), and keeps its own stack name and answers apart from the main stack's."""

from __future__ import annotations

import tomllib
from pathlib import Path

from sg_reconciler_tools.local.stack import read_template

ROOT = Path(__file__).resolve().parents[3]
CONFIG = tomllib.loads((ROOT / "samconfig.toml").read_text())


def test_each_environment_is_its_own_stack_built_from_its_own_template() -> None:
    assert sorted(CONFIG) == ["default", "fleet", "version"]
    names = {env: CONFIG[env]["global"]["parameters"]["stack_name"] for env in ("default", "fleet")}
    assert names == {"default": "sg-reconciler", "fleet": "sg-reconciler-central"}
    fleet = CONFIG["fleet"]
    assert fleet["build"]["parameters"]["template_file"] == "fleet.yaml"
    # deploy takes what `sam build` wrote, never the source template
    assert "template_file" not in fleet["deploy"]["parameters"]
    assert "template_file" not in fleet["global"]["parameters"]


def test_the_central_stack_may_create_its_functions_roles() -> None:
    fleet = read_template(ROOT / "fleet.yaml")
    kinds = {r["Type"] for r in fleet["Resources"].values()}
    assert "AWS::Serverless::Function" in kinds  # SAM makes it a role
    deploy = CONFIG["fleet"]["deploy"]["parameters"]
    assert deploy["capabilities"] == CONFIG["default"]["deploy"]["parameters"]["capabilities"]
    assert deploy["s3_prefix"] != CONFIG["default"]["deploy"]["parameters"]["s3_prefix"]
