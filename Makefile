# One entry point for every check. `make setup` is idempotent: it rebuilds .venv only when
# pyproject.toml changed since the last install.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test lint typecheck unit suite demo bench release clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/cfn-lint template.yaml fleet.yaml
	$(BIN)/statelint statemachine/*.asl.json

typecheck: setup
	$(BIN)/mypy layers tools functions benchmarks tests/fakes.py

# The edit-test loop (under 30 s): the pure core and triggers, and the use cases on the
# in-memory fakes of tests/fakes.py. No moto: the adapters on moto, the real ASL on the local
# runtime, the fuzzer and the evidence run in `make suite`.
UNIT_TESTS := tests/unit

unit: setup
	HYPOTHESIS_PROFILE=ci $(BIN)/pytest -q $(UNIT_TESTS)

# The whole suite on every core (pytest-xdist), one test file per worker at a time (its
# module fixtures, the local runtime among them, are built once). The fault matrix the
# evidence tests collect is printed at the end (tests/conftest.py gathers the workers' rows).
suite: setup
	HYPOTHESIS_PROFILE=ci $(BIN)/pytest -q -n auto --dist loadfile

test: lint typecheck suite

demo: setup
	$(BIN)/sg-reconciler demo

bench: setup
	$(BIN)/python -m benchmarks.run

# A release for a service-managed StackSet (docs/organization.md):
# make release BUCKET='sg-releases-${AWS::Region}' PREFIX=1.0.0 [POLICY=policy.yaml] [REGIONS=eu-west-1,us-east-1]
release: setup
	@test -n "$(BUCKET)" || (echo "make release needs BUCKET=<bucket>" >&2; exit 2)
	$(BIN)/sg-reconciler release-template --bucket '$(value BUCKET)' --prefix '$(PREFIX)' --out release \
		$(if $(POLICY),--policy '$(POLICY)') --regions '$(REGIONS)'

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
