"""Errors named for the state machine: Retry and Catch match these class names exactly.

A Lambda step that raises one of these reports `errorType` = the class name, which Step
Functions uses as the error name. AWS error codes are mapped to them by exact code, never by
matching message text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class ReconcilerError(Exception):
    """Base class; the message is the cause shown in the console, `code` the AWS error code if any."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class Throttled(ReconcilerError):
    """The API's rate limit answered (RequestLimitExceeded, ThrottlingException): retry with backoff."""


class TransientAwsError(ReconcilerError):
    """A server-side error (InternalError, 5xx, Unavailable): retry with backoff."""


class AccessDenied(ReconcilerError):
    """IAM denied the call (UnauthorizedOperation, AccessDenied): not retried."""


class QuotaExceeded(ReconcilerError):
    """The group would pass its rule quota (RulesPerSecurityGroupLimitExceeded)."""


class GroupNotFound(ReconcilerError):
    """The security group no longer exists (InvalidGroup.NotFound)."""


class NotOwned(ReconcilerError):
    """A step would revoke or modify a rule without the owner tag (invariant 3)."""


class AwsCallFailed(ReconcilerError):
    """Any other AWS error, with its code in the message."""


class InvalidPlan(ReconcilerError):
    """The execution input is not a valid plan: rejected before any lock or write."""


class PlanRefused(ReconcilerError):
    """The refreshed plan cannot be ordered safely within the quota."""


class LockBusy(ReconcilerError):
    """Another execution holds a group's lock: wait and retry."""


class LockLost(ReconcilerError):
    """This execution's lease on a group expired and another execution took it."""


class ExecutionStopped(ReconcilerError):
    """The execution stopped (its status change reached the janitor) while its lock step
    ran: the locks that step took are given back, none outlives the execution."""


class NotYetVisible(ReconcilerError):
    """Rules just written are not yet visible to describe (eventual consistency): retry."""


class RuleChanged(ReconcilerError):
    """A rule a step adopts is gone or no longer the planned rule: not retried, the execution
    rolls back and the next run plans from what is there."""


class AuthorizeFailed(ReconcilerError):
    """A group's authorize calls failed (after their retries): the execution rolls back."""


class RevokeFailed(ReconcilerError):
    """A group's revoke calls failed (after their retries): the execution stops in a safe superset."""


class RollbackIncomplete(ReconcilerError):
    """Some batch of groups was not rolled back (a lost lock, a failed call): the new rules
    stay there, a safe superset, and the cause says which batches and why."""


class ReadsOutOfTime(ReconcilerError):
    """The paced reads could not finish before the function's deadline (too many for the
    pace, or throttled by others for too long): not retried, as the same read takes as long
    again; the next run reads again."""


class BadConfiguration(ReconcilerError):
    """A function's environment or the policy document is invalid."""


THROTTLE_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestThrottled",
        "SlowDown",
    }
)
TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "Unavailable",
        "InternalServerError",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
DENIED_CODES = frozenset(
    {
        "UnauthorizedOperation",
        "AccessDenied",
        "AccessDeniedException",
        "UnauthorizedAccess",
        "AuthFailure",
    }
)
QUOTA_CODES = frozenset({"RulesPerSecurityGroupLimitExceeded", "SecurityGroupLimitExceeded"})
GROUP_GONE_CODES = frozenset(
    {"InvalidGroup.NotFound", "InvalidGroupId.NotFound", "InvalidGroupId.Malformed"}
)


def from_aws_code(code: str, message: str, status: int | None = None) -> ReconcilerError:
    """The typed error for an AWS error code (exact match)."""
    kind: type[ReconcilerError] = AwsCallFailed
    if code in THROTTLE_CODES:
        kind = Throttled
    elif code in DENIED_CODES:
        kind = AccessDenied
    elif code in QUOTA_CODES:
        kind = QuotaExceeded
    elif code in GROUP_GONE_CODES:
        kind = GroupNotFound
    elif code in TRANSIENT_CODES or (status is not None and status >= 500):
        kind = TransientAwsError
    return kind(f"{code}: {message}", code)


class WouldLoseTraffic(ReconcilerError):
    """The live guard refused a revoke or modify: what stays would not allow what the desired
    state needs (someone changed the group after the plan was made). No call was made."""


MAX_VALIDATION_ERRORS = 10


def validation_message(
    err: ValidationError,
    root: str = "",
    limit: int = MAX_VALIDATION_ERRORS,
    at: tuple[str, ...] = (),
) -> str:
    """A pydantic ValidationError in one line: `where: what` per error (`root` names the
    whole document), `; `-separated, the first `limit` and how many more. The one formatter
    of the boundary's models (step inputs, settings, the policy, trigger events); the input
    values pydantic can attach are left out. `at` is where the validated value sits in the
    document (a part validated on its own reads as if the whole was)."""
    errors = err.errors(include_url=False, include_input=False, include_context=False)
    parts = []
    for item in errors[:limit]:
        where = ".".join(str(p) for p in (*at, *item["loc"])) or root
        if item["type"] == "extra_forbidden":
            message = "unknown field (not permitted)"
        else:
            message = item["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        parts.append(f"{where}: {message}" if where else message)
    more = f" (+{len(errors) - limit} more)" if len(errors) > limit else ""
    return ("; ".join(parts) or "invalid").replace("\n", " ") + more
