"""The stack starts on the local runtime with either Powertools choice, and creates its own
Powertools layer only when it bundles it (moto keeps no layers on a function, so which layer
each function gets is checked on the translated template: tests/integration/planner)."""

from __future__ import annotations

import pytest
from event_samples import load_event
from sg_reconciler_tools.demo.play import TEMPLATE
from sg_reconciler_tools.local import LocalRuntime


@pytest.mark.parametrize("choice", ["bundled", "public"])
def test_the_stack_starts_and_bundles_powertools_only_when_asked(choice: str) -> None:
    with LocalRuntime(TEMPLATE, parameters={"PowertoolsLayer": choice}) as runtime:
        described = [
            layer["LatestMatchingVersion"]["Description"]
            for layer in runtime.clients.lambda_.list_layers()["Layers"]
        ]
        # the functions still run: the drift-repair entry point of the planner
        answer = runtime.invoke("PlannerFunction", load_event("scheduled"))
    bundled = [d for d in described if d.startswith("Powertools for AWS Lambda")]
    assert len(described) == (2 if choice == "bundled" else 1)
    assert len(bundled) == (1 if choice == "bundled" else 0)
    assert isinstance(answer, dict), answer
