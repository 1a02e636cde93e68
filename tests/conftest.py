"""Shared test configuration: hypothesis profiles and small fixtures every suite may use."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# `make test` sets HYPOTHESIS_PROFILE=ci: fewer examples, no deadline (the machine is noisy).
settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=200, deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
