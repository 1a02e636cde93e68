"""Logger, Tracer and Metrics, created once for every function."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = "sg-reconciler"

logger = Logger(service=SERVICE)
# Only botocore: every call we trace is an AWS SDK call. patch_all() would also import and patch
# sqlite3, http.client and requests (when present) on every cold start (docs/extending.md).
tracer = Tracer(service=SERVICE, patch_modules=("botocore",))
metrics = Metrics(service=SERVICE, namespace="SGReconciler")
