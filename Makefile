# Two entry points on a fresh machine: `make demo` (the main job, on the embedded default) and
# `make test` (everything CI checks). Both create the virtual environment they need.
SHELL   := /bin/bash
VENV    ?= .venv
PYTHON  ?= python3
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp

.PHONY: demo test lint typecheck unit bench soak clean

# The package is installed editable: the folder ratchet_runner/ is the package itself, so a new or
# moved module is seen without installing again.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The refund of ticket T-90104: approved by an agent; the provider's reply is lost after it made
# the refund; Ratchet reconciles instead of calling again: one refund, one call.
DEMO_HOME := .ratchet/demo
demo: $(STAMP)
	$(BIN)/ratchet validate specs/*.yaml
	$(BIN)/ratchet table specs/refund.yaml
	RATCHET_HOME=$(DEMO_HOME) $(BIN)/ratchet reset --all
	RATCHET_HOME=$(DEMO_HOME) $(BIN)/ratchet run specs/refund.yaml --example T-90104
	RATCHET_HOME=$(DEMO_HOME) $(BIN)/ratchet approve T-90104 --as agent-7 --role agent
	RATCHET_HOME=$(DEMO_HOME) $(BIN)/ratchet trace T-90104
	RATCHET_HOME=$(DEMO_HOME) $(BIN)/ratchet effects

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# One worker per core, each test file on one worker (a file's fixtures, ports and shared homes
# stay in one process); every PostgreSQL test makes its own schema. The ten slowest are named at
# the end (the simulation's figures too), so CI shows where its time goes.
unit: $(STAMP)
	$(BIN)/pytest -n auto --dist loadfile --durations=10

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python -m bench

# Not CI: the command-worker race test SOAK_RUNS times on SQLite and on PostgreSQL
# ($$RATCHET_TEST_PG), with every core kept busy; then SOAK_SCHEDULES schedules of the simulation
# (none by default); then, the cores busy again, the booking saga's migration crash-checked
# (ratchet check --migrate-to --kill). A machine of its own: it takes the cores, about 21 minutes
# on 2.
SOAK_RUNS      ?= 50
SOAK_SCHEDULES ?= 0
soak: $(STAMP)
	$(BIN)/python -m bench.soak --runs $(SOAK_RUNS) --schedules $(SOAK_SCHEDULES)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
