"""Triggers of a re-plan: CloudTrail events through SQS, and the drift-repair schedule."""
