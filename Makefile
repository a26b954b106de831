# Two entry points on a fresh machine: `make demo` (the main job, on the embedded default) and
# `make test` (everything CI checks). Both create the virtual environment they need.
VENV    ?= .venv
PYTHON  ?= python3
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp

.PHONY: demo test lint typecheck unit bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ratchet validate specs/*.yaml
	$(BIN)/ratchet table specs/refund.yaml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
