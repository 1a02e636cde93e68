"""Shared test configuration: hypothesis profiles and small fixtures every suite may use."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# Tests never reach AWS: fake credentials, a fixed region, and a lighter moto EC2.
for _name, _value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "eu-west-1",
    "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    "POWERTOOLS_METRICS_NAMESPACE": "SGReconciler",
    "POWERTOOLS_TRACE_DISABLED": "true",
}.items():
    os.environ.setdefault(_name, _value)

# `make test` sets HYPOTHESIS_PROFILE=ci: fewer examples, no deadline (the machine is noisy).
settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
