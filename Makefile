# Two commands matter: `make demo` (see exactly-once work locally) and `make test`.
# Every target creates venv/ and installs the pinned requirements when they changed.
PYTHON ?= python3
VENV := venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
REQUIREMENTS := requirements.txt requirements-dev.txt function/requirements.txt policy/requirements.txt
LINTED := function infra policy localrun bench tests __main__.py

.PHONY: install lint typecheck test demo bench clean

$(STAMP): $(REQUIREMENTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

typecheck: $(STAMP)
	$(BIN)/mypy $(LINTED)

# The tests start the Firestore emulator themselves on a free loopback port (or use
# FIRESTORE_EMULATOR_HOST when it is set) and stop it at the end.
test: lint typecheck
	$(BIN)/python -m pytest

demo: $(STAMP)
	$(BIN)/python -m localrun.demo $(ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench.run $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .demo
