"""The logic of the state machine's Lambda steps: one module per step handler of
functions/steps, of the same name; `common` holds what they share.

Each function takes the step's input (validated by a pydantic model of app/contracts/)
and the ports it needs (`sg_reconciler.core.ports`: the adapters in Lambda, in-memory fakes
in tests), and returns the JSON the state machine stores (its output model, dumped). Errors
are the typed errors of sg_reconciler.errors, so Retry and Catch in the ASL match them by
name. Nothing is imported here: a step's Lambda loads only its own module (cold start).
"""
