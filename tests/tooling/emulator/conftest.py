"""Fixtures of the local-runtime tests: the fixture template and one runtime per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sg_reconciler_tools.local import LocalRuntime

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATE = FIXTURES / "template.yaml"


@pytest.fixture(scope="module")
def runtime() -> Iterator[LocalRuntime]:
    """A deployed fixture stack shared by a module's tests (each test uses its own names)."""
    with LocalRuntime(TEMPLATE) as local:
        yield local
