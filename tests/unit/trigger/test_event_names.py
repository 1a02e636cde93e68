"""The event names come from the detail models' Literal eventName annotations: one model
per name, no name kept by hand beside them."""

from __future__ import annotations

from typing import Literal, get_args

import pytest
from sg_reconciler.trigger.cloudtrail import (
    EC2_EVENT_NAMES,
    ELB_EVENT_NAMES,
    EVENT_NAMES,
    CloudTrailDetail,
    CloudTrailEvent,
    event_names,
)


def test_each_name_has_one_model_and_the_event_model_routes_them_all() -> None:
    models = get_args(CloudTrailEvent.model_fields["detail"].annotation)
    assert event_names(CloudTrailEvent.model_fields["detail"].annotation) == EVENT_NAMES
    assert len(EVENT_NAMES) == len(set(EVENT_NAMES)) == len(models)
    assert not set(EC2_EVENT_NAMES) & set(ELB_EVENT_NAMES)


class Named(CloudTrailDetail):
    eventName: Literal["Named"]


class Other(CloudTrailDetail):
    eventName: Literal["Other"]


class Loose(CloudTrailDetail):
    eventName: str  # any name: it could not be routed


def test_a_model_without_a_literal_name_cannot_join_a_union() -> None:
    assert event_names(Named | Other) == ("Named", "Other")
    with pytest.raises(ValueError):
        event_names(Named | Loose)
