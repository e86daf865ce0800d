# Two commands on a fresh machine with Python 3.11 and make:
#   make demo   the main job (optimize) on the built-in default models
#   make test   lint + the documentation build + the test suite (tests/, tutorial notebooks)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test test-slow lint docs docs-check catalog bench-report clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test,torch,docs]"
	rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(BIN)/tvm-hetero demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python ci/gen_catalog.py --check
	$(BIN)/python ci/check_layers.py
	$(BIN)/python benchmarks/report/report.py --check

# the site with the tutorials executed (docs/_build/html/index.html)
docs: $(STAMP)
	TVM_HETERO_DOCS_EXECUTE=force $(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# the site as stored (notebooks not run: the tests run them), every warning an error
docs-check: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -E -b html docs build/docs-check

# two pytest workers (the suite compiles on one core each), then alone what needs both cores
test: lint docs-check
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow and not whole_machine"
	$(BIN)/python -m pytest -m "whole_machine and not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow tests

catalog: $(STAMP)
	$(BIN)/python ci/gen_catalog.py

# the benchmark tables in the documents, from benchmarks/results/ (make lint checks them)
bench-report: $(STAMP)
	$(BIN)/python benchmarks/report/report.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info docs/_build
