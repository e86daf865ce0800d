# Two commands on a fresh machine with Python 3.11 and make:
#   make demo   the main job (optimize) on the built-in default models
#   make test   lint + the test suite (tests/ and the tutorial notebooks)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test test-slow lint catalog clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test,torch]"
	rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(BIN)/tvm-hetero demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python ci/gen_catalog.py --check
	$(BIN)/python ci/check_layers.py

# two pytest workers (the suite compiles on one core each), then alone what needs both cores
test: lint
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow and not whole_machine"
	$(BIN)/python -m pytest -m "whole_machine and not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow tests

catalog: $(STAMP)
	$(BIN)/python ci/gen_catalog.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
