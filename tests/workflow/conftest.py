"""The #3639 world on the local runtime, reconciled, for every real-ASL workflow test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, reconcile
from sg_reconciler_tools.demo.world import DemoWorld, build_world
from sg_reconciler_tools.local import LocalRuntime


@pytest.fixture
def world() -> Iterator[DemoWorld]:
    quiet_handlers()
    with LocalRuntime(TEMPLATE) as runtime:
        built = build_world(runtime)
        reconcile(built)
        yield built
