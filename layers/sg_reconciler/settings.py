"""Function configuration: one pydantic model per function, read from the environment.

Handlers load their settings at the start of each invocation (cheap, and tests can set the
environment without re-importing); logic receives the model and never reads os.environ.
"""

from __future__ import annotations

import os
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sg_reconciler.core.pacing import (
    DEFAULT_READS_PER_SECOND,
    DEFAULT_VERIFICATION_PERIOD_SECONDS,
    DEFAULT_WRITES_PER_SECOND,
)
from sg_reconciler.core.rules import DEFAULT_OWNER
from sg_reconciler.errors import BadConfiguration, validation_message


class _FromEnvironment(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True, defer_build=True)


class _Deployment(_FromEnvironment):
    """What every function knows of its stack: the owner name has one source, the template."""

    owner: str = Field(DEFAULT_OWNER, alias="OWNER_NAME", min_length=1)
    owner_claim_parameter: str = Field("", alias="OWNER_CLAIM_PARAMETER_NAME")
    stack_id: str = Field("", alias="STACK_ID")
    lock_table: str = Field("", alias="LOCK_TABLE_NAME")
    plan_table: str = Field("", alias="PLAN_TABLE_NAME")
    # The brake's window: removals counted together over this long (invariant 14)
    brake_window_seconds: int = Field(
        86_400, alias="BRAKE_WINDOW_SECONDS", ge=3_600, le=30 * 86_400
    )
    # ELBv2 describes a second, and the same share of EC2's read buckets (core/pacing.py)
    reads_per_second: float = Field(
        DEFAULT_READS_PER_SECOND, alias="READS_PER_SECOND", gt=0, le=1000
    )


class StepSettings(_Deployment):
    """Settings of the state machine's step functions."""

    lease_seconds: int = Field(900, alias="LOCK_LEASE_SECONDS", ge=300, le=86_400)
    policy_parameter: str = Field("", alias="POLICY_PARAMETER_NAME")
    writes_per_second: float = Field(
        DEFAULT_WRITES_PER_SECOND, alias="WRITES_PER_SECOND", gt=0, le=1000
    )
    # The inventory index: under the locks, a revoke reads fresh only the target groups the
    # index says could use what it takes away (docs/architecture.md, "Reads"); none: all
    index_table: str = Field("", alias="INDEX_TABLE_NAME")
    verification_period_seconds: int = Field(
        DEFAULT_VERIFICATION_PERIOD_SECONDS,
        alias="VERIFICATION_PERIOD_SECONDS",
        ge=3_600,
        le=7 * 86_400,
    )


class PlannerSettings(_Deployment):
    """Settings of the planner function."""

    policy_parameter: str = Field(alias="POLICY_PARAMETER_NAME", min_length=1)
    state_machine_arn: str = Field(alias="STATE_MACHINE_ARN", min_length=1)
    own_role_arns: str = Field("", alias="OWN_ROLE_ARNS", description="comma-separated role ARNs")
    account_id: str = Field("", alias="ACCOUNT_ID")
    region: str = Field("", alias="AWS_REGION")
    # The inventory kept from events (docs/architecture.md, "The inventory index"); none:
    # every run reads the account
    index_table: str = Field("", alias="INDEX_TABLE_NAME")
    verification_period_seconds: int = Field(
        DEFAULT_VERIFICATION_PERIOD_SECONDS,
        alias="VERIFICATION_PERIOD_SECONDS",
        ge=3_600,
        le=7 * 86_400,
    )

    @property
    def own_roles(self) -> frozenset[str]:
        return frozenset(a.strip() for a in self.own_role_arns.split(",") if a.strip())


class JanitorSettings(_Deployment):
    """Settings of the function that frees a stopped execution's locks."""

    state_machine_arn: str = Field(alias="STATE_MACHINE_ARN", min_length=1)
    # How long the record that an execution ended is kept (longer than any lock step runs)
    lease_seconds: int = Field(900, alias="LOCK_LEASE_SECONDS", ge=300, le=86_400)


class ReporterSettings(_Deployment):
    """Settings of the function that reports each execution's outcome to the fleet's bus."""

    fleet_event_bus_arn: str = Field(alias="FLEET_EVENT_BUS_ARN", min_length=1)
    stack_name: str = Field(alias="STACK_NAME", min_length=1)
    account_id: str = Field(alias="ACCOUNT_ID", min_length=1)
    region: str = Field(alias="AWS_REGION", min_length=1)


class FleetRecorderSettings(_FromEnvironment):
    """Settings of the central stack's function that keeps each deployment's last outcome."""

    fleet_table: str = Field(alias="FLEET_TABLE_NAME", min_length=1)


Settings = TypeVar("Settings", bound=_FromEnvironment)


def load_settings(model: type[Settings]) -> Settings:
    """Validate the environment into `model`; a bad value is a BadConfiguration naming the variable."""
    try:
        return model.model_validate(dict(os.environ))
    except ValidationError as err:
        raise BadConfiguration(f"environment variable {validation_message(err)}") from None
