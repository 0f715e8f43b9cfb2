# Every target creates .venv on first use, so each works on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test test-fast lint typecheck check bench experiments clean

$(STAMP): setup.py pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m experiments.demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not tensorflow"

lint: $(STAMP)
	$(BIN)/ruff check tfplace experiments tests models benchmarks run_experiments.py
	$(BIN)/ruff format --check tfplace experiments tests models benchmarks run_experiments.py

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

bench: $(STAMP)
	$(BIN)/python benchmarks/placement_speed.py

experiments: $(STAMP)
	PYTHONPATH=. $(BIN)/python run_experiments.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
