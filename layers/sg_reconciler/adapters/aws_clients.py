"""boto3 clients, one per service and retry policy for the life of the process."""

from __future__ import annotations

from functools import cache
from typing import Any

import boto3
from botocore.config import Config


@cache
def client(service: str, attempts: int = 1) -> Any:
    """A client making `attempts` tries per call in all (1 for steps: Step Functions retries,
    visibly in the console, with its own backoff)."""
    make: Any = boto3.client  # typed per service literal; the service here is a plain str
    return make(
        service, config=Config(retries={"mode": "standard", "total_max_attempts": attempts})
    )
