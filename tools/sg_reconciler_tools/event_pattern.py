"""The EventBridge rule pattern of the trigger queue, derived from the trigger's event names.

The template holds the deployed pattern (with the writer roles' ARNs as !GetAtt); tests pin
it to this function, so the template and the classifier cannot drift apart. It is dev
tooling: nothing deployed builds the pattern at run time.
"""

from __future__ import annotations

from typing import Any

from sg_reconciler.trigger.cloudtrail import (
    CLOUDTRAIL_DETAIL_TYPE,
    EC2_EVENT_SOURCE,
    EC2_SOURCE,
    ELB_EVENT_SOURCE,
    ELB_SOURCE,
    EVENT_NAMES,
)


def event_pattern(own_role_arns: list[str]) -> dict[str, Any]:
    """The EventBridge rule pattern for the trigger queue.

    It keeps successful calls named in `EVENT_NAMES` and drops calls whose session was
    issued by one of the reconciler's roles. `anything-but` never matches a missing field,
    and IAM users and root log an empty `sessionIssuer` (no `arn`), so the filter is an
    `$or` of "issuer ARN absent" and "issuer ARN is none of ours"; a bare `anything-but`
    would silently drop every IAM-user change.
    """
    detail: dict[str, Any] = {
        "eventSource": [EC2_EVENT_SOURCE, ELB_EVENT_SOURCE],
        "eventName": list(EVENT_NAMES),
        "errorCode": [{"exists": False}],
    }
    own = list(dict.fromkeys(own_role_arns))  # deduplicated, in the template's order
    if own:
        detail["$or"] = [
            {"userIdentity": {"sessionContext": {"sessionIssuer": {"arn": [{"exists": False}]}}}},
            {
                "userIdentity": {
                    "sessionContext": {"sessionIssuer": {"arn": [{"anything-but": own}]}}
                }
            },
        ]
    return {
        "source": [EC2_SOURCE, ELB_SOURCE],
        "detail-type": [CLOUDTRAIL_DETAIL_TYPE],
        "detail": detail,
    }
