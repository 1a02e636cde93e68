"""samconfig.toml deploys each template as its own stack: the central stack's environment
(docs/organization.md) builds fleet.yaml, never deploys it unbuilt (its layers would miss
their packages), and keeps its own stack name and answers apart from the main stack's. Each
environment builds into a directory of its own and deploys what it built there: with one
build directory, the last `sam build` decided which template both deploys took."""

from __future__ import annotations

import tomllib
from pathlib import Path, PurePosixPath

from sg_reconciler_tools.local.stack import read_template

ROOT = Path(__file__).resolve().parents[3]
CONFIG = tomllib.loads((ROOT / "samconfig.toml").read_text())


def test_each_environment_is_its_own_stack_built_from_its_own_template() -> None:
    assert sorted(CONFIG) == ["default", "fleet", "version"]
    names = {env: CONFIG[env]["global"]["parameters"]["stack_name"] for env in ("default", "fleet")}
    assert names == {"default": "sg-reconciler", "fleet": "sg-reconciler-central"}
    fleet = CONFIG["fleet"]
    assert fleet["build"]["parameters"]["template_file"] == "fleet.yaml"
    assert "template_file" not in fleet["global"]["parameters"]


# SAM CLI's defaults (samcli/commands/_utils/constants.py): `sam build` writes into
# DEFAULT_BUILD_DIR unless `build_dir` is set, and `sam deploy` without `template_file`
# takes the template built there (DEFAULT_BUILT_TEMPLATE_PATH).
SAM_BUILD_DIR = ".aws-sam/build"


def build_dir(env: str) -> PurePosixPath:
    return PurePosixPath(CONFIG[env]["build"]["parameters"].get("build_dir", SAM_BUILD_DIR))


def deployed_template(env: str) -> PurePosixPath:
    default = f"{SAM_BUILD_DIR}/template.yaml"
    return PurePosixPath(CONFIG[env]["deploy"]["parameters"].get("template_file", default))


def test_each_environment_deploys_the_template_it_built_in_a_directory_of_its_own() -> None:
    dirs = {env: build_dir(env) for env in ("default", "fleet")}
    # `sam build` empties its directory first, and keeps its build graph (build.toml) beside
    # it: neither environment's build may sit in, or hold, the other's
    main, fleet = dirs["default"], dirs["fleet"]
    assert not main.is_relative_to(fleet) and not fleet.is_relative_to(main)
    assert main.parent != fleet.parent
    for env, built in dirs.items():
        # the deploy takes what `sam build` wrote, never the source template
        assert deployed_template(env) == built / "template.yaml", env


def test_the_guided_central_deploy_saves_its_answers_in_this_file() -> None:
    # A deploy whose template_file samconfig.toml sets reads samconfig.toml from the project
    # but saves --guided answers beside that template (SAM CLI's samconfig_dir), in the build
    # directory the next build empties; an absolute --config-file keeps them here.
    guided = 'sam deploy --guided --config-env fleet --config-file "$PWD/samconfig.toml"'
    for doc in ("samconfig.toml", "docs/organization.md", "CHANGELOG.md"):
        text = " ".join((ROOT / doc).read_text().replace("#", " ").split())
        assert guided in text, doc
        assert "sam deploy --guided --config-env fleet`" not in text, doc


def test_the_central_stack_may_create_its_functions_roles() -> None:
    fleet = read_template(ROOT / "fleet.yaml")
    kinds = {r["Type"] for r in fleet["Resources"].values()}
    assert "AWS::Serverless::Function" in kinds  # SAM makes it a role
    deploy = CONFIG["fleet"]["deploy"]["parameters"]
    assert deploy["capabilities"] == CONFIG["default"]["deploy"]["parameters"]["capabilities"]
    assert deploy["s3_prefix"] != CONFIG["default"]["deploy"]["parameters"]["s3_prefix"]
