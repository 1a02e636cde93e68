"""The policy document in AWS: an SSM parameter (String or SecureString)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from sg_reconciler.core.policy import Policy, PolicyError
from sg_reconciler.policy import parse_policy

if TYPE_CHECKING:
    from mypy_boto3_ssm import SSMClient


def load_policy_from_ssm(ssm: SSMClient, name: str, owner: str | None = None) -> Policy:
    """Read the policy from an SSM parameter (String or SecureString); `owner`: see
    `parse_policy`."""
    try:
        response = ssm.get_parameter(Name=name, WithDecryption=True)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "Error")
        raise PolicyError(f"SSM parameter {name}: {code}") from None
    except BotoCoreError as err:
        raise PolicyError(f"SSM parameter {name}: {err}") from None
    return parse_policy(response["Parameter"].get("Value", ""), f"SSM parameter {name}", owner)
