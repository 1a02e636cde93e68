"""The template carries what `sam publish` needs to put a release in the AWS Serverless
Application Repository, in the shape its CreateApplication API accepts (the patterns and
limits below are that API's, as botocore's `serverlessrepo` model documents them)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from sg_reconciler_tools.local.stack import read_template

ROOT = Path(__file__).resolve().parents[3]
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")


def application() -> dict[str, Any]:
    metadata = read_template(ROOT / "template.yaml").get("Metadata") or {}
    found = metadata.get("AWS::ServerlessRepo::Application")
    assert isinstance(found, dict), "template.yaml has no AWS::ServerlessRepo::Application"
    return found


def project() -> dict[str, Any]:
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"])


def test_the_application_metadata_is_what_create_application_accepts() -> None:
    app = application()
    assert re.fullmatch(r"[a-zA-Z0-9\-]{1,140}", app["Name"])
    assert re.fullmatch(r"[a-z0-9](([a-z0-9]|-(?!-))*[a-z0-9])?", app["Author"])
    assert len(app["Author"]) <= 127
    assert 1 <= len(app["Description"].strip()) <= 256
    assert 1 <= len(app["Labels"]) <= 10
    for label in app["Labels"]:
        assert re.fullmatch(r"[a-zA-Z0-9+\-_:/@]{1,127}", label), label
    # `sam publish` uploads the local files LicenseUrl and ReadmeUrl name
    assert (ROOT / app["LicenseUrl"]).is_file() and (ROOT / app["ReadmeUrl"]).is_file()


def test_the_release_is_the_projects_version_and_license() -> None:
    app, pyproject = application(), project()
    assert SEMVER.match(app["SemanticVersion"]), app["SemanticVersion"]
    assert app["SemanticVersion"] == pyproject["version"]
    assert app["SpdxLicenseId"] == pyproject["license"] == "Apache-2.0"
    assert pyproject["license-files"] == [app["LicenseUrl"]]
    license_text = (ROOT / app["LicenseUrl"]).read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text


def test_the_changelog_records_each_release_older_than_this_one() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (\S+)", changelog, re.M)
    version = application()["SemanticVersion"]
    # changes land under Unreleased; releasing renames it to the version (docs/deploying.md, Releasing)
    assert headings[0] in ("Unreleased", version), headings[0]
    current = tuple(int(part) for part in version.split("."))
    released = [tuple(int(p) for p in h.split(".")) for h in headings[1:]]
    assert released, "CHANGELOG.md lists no earlier release"
    assert all(older < current for older in released), (released, current)
    assert released == sorted(released, reverse=True), "newest first"
