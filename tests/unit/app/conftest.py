"""The steps' tests run on in-memory fakes (tests/fakes.py): no moto, no local runtime."""

from __future__ import annotations

import pytest
from fakes import FakePacer
from unit.app.steps_world import World


@pytest.fixture
def world() -> World:
    world = World()
    world.rules.pacer = FakePacer()
    return world
