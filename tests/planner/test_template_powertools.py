"""The public Powertools layer a deployment gets is the release the tests run against."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_public_powertools_layer_is_the_release_the_tests_pin() -> None:
    template = (ROOT / "template.yaml").read_text()
    declared = re.search(
        r"^  PowertoolsVersion:\n(?:    .*\n)*?    Default: \"([0-9.]+)\"", template, re.M
    )
    assert declared, "template.yaml declares no PowertoolsVersion default"
    pinned = [
        d
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        if d.startswith("aws-lambda-powertools")
    ]
    assert pinned == [f"aws-lambda-powertools[tracer,parser]=={declared.group(1)}"]
    assert version("aws-lambda-powertools") == declared.group(1)
    # the layer is found by that release, not by a layer number that drifts from it
    assert "/aws/service/powertools/python/arm64/python3.13/${PowertoolsVersion}" in template
