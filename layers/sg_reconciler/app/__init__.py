"""Use cases, one module per entry point: the planner (plan_batch), the state machine's
steps (steps), and the live plan both share (live_plan)."""
