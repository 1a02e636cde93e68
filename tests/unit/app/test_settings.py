"""Function settings from the environment (`sg_reconciler.settings`): defaults, parsing, and
a bad value as a BadConfiguration naming the variable."""

from __future__ import annotations

import pytest
from sg_reconciler.core.pacing import DEFAULT_WRITES_PER_SECOND
from sg_reconciler.core.rules import DEFAULT_OWNER
from sg_reconciler.errors import BadConfiguration
from sg_reconciler.settings import (
    JanitorSettings,
    PlannerSettings,
    StepSettings,
    load_settings,
)

VARIABLES = {
    field.alias
    for model in (StepSettings, PlannerSettings, JanitorSettings)
    for field in model.model_fields.values()
    if field.alias
}
ARN = "arn:aws:states:eu-west-1:123456789012:stateMachine:apply"


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No setting of the test process leaks in (AWS_REGION among them)."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_step_settings_default_to_the_templates_defaults() -> None:
    config = load_settings(StepSettings)

    assert config.owner == DEFAULT_OWNER
    assert config.lease_seconds == 900
    assert config.writes_per_second == DEFAULT_WRITES_PER_SECOND
    assert (config.lock_table, config.plan_table, config.policy_parameter) == ("", "", "")


def test_values_are_parsed_from_their_variables(environment: pytest.MonkeyPatch) -> None:
    environment.setenv("OWNER_NAME", "team-a")
    environment.setenv("LOCK_LEASE_SECONDS", "1200")
    environment.setenv("WRITES_PER_SECOND", "2.5")
    environment.setenv("LOCK_TABLE_NAME", "locks")
    environment.setenv("UNRELATED", "ignored")

    config = load_settings(StepSettings)

    assert (config.owner, config.lease_seconds, config.writes_per_second, config.lock_table) == (
        "team-a",
        1200,
        2.5,
        "locks",
    )


def test_the_planners_own_roles_are_a_comma_separated_list(
    environment: pytest.MonkeyPatch,
) -> None:
    environment.setenv("POLICY_PARAMETER_NAME", "/policy")
    environment.setenv("STATE_MACHINE_ARN", ARN)
    environment.setenv("OWN_ROLE_ARNS", " arn:role/a, ,arn:role/b,")
    environment.setenv("AWS_REGION", "eu-west-1")

    config = load_settings(PlannerSettings)

    assert config.own_roles == frozenset({"arn:role/a", "arn:role/b"})
    assert (config.region, config.state_machine_arn) == ("eu-west-1", ARN)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("LOCK_LEASE_SECONDS", "60", "LOCK_LEASE_SECONDS: Input should be greater than or equal"),
        ("LOCK_LEASE_SECONDS", "90000", "LOCK_LEASE_SECONDS: Input should be less than or equal"),
        ("LOCK_LEASE_SECONDS", "soon", "LOCK_LEASE_SECONDS: Input should be a valid integer"),
        ("WRITES_PER_SECOND", "0", "WRITES_PER_SECOND: Input should be greater than 0"),
        ("WRITES_PER_SECOND", "fast", "WRITES_PER_SECOND: Input should be a valid number"),
        ("OWNER_NAME", "", "OWNER_NAME: String should have at least 1 character"),
    ],
)
def test_a_bad_value_is_a_bad_configuration_naming_the_variable(
    environment: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    environment.setenv(variable, value)

    with pytest.raises(BadConfiguration) as caught:
        load_settings(StepSettings)

    assert str(caught.value).startswith(f"environment variable {message}")


def test_missing_required_variables_are_all_named() -> None:
    with pytest.raises(BadConfiguration) as caught:
        load_settings(PlannerSettings)

    assert str(caught.value) == (
        "environment variable POLICY_PARAMETER_NAME: Field required; "
        "STATE_MACHINE_ARN: Field required"
    )
    with pytest.raises(BadConfiguration, match="STATE_MACHINE_ARN: Field required"):
        load_settings(JanitorSettings)
