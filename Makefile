# Two commands matter: `make demo` (see exactly-once work locally) and `make test`.
# Every target creates venv/ and installs the pinned requirements when they changed; `make install`
# also prepares policy/venv/, the policy pack's own virtualenv, for `pulumi up --policy-pack policy`.
PYTHON ?= python3
VENV := venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
REQUIREMENTS := requirements.txt requirements-dev.txt function/requirements.txt function/pyproject.toml \
	policy/requirements.txt ops/requirements.txt tests/requirements-function.txt
# The function is deployed on Cloud Run's python312 runtime: its tests run on that Python too.
# (the first python3.12 that runs: on PATH, or one installed by pyenv)
RUNTIME_PYTHON ?= $(shell for p in python3.12 $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12; \
	do "$$p" --version >/dev/null 2>&1 && echo "$$p" && break; done)
RUNTIME_VENV := venv-py312
# The policy pack runs in the virtualenv its PulumiPolicy.yaml names (virtualenv: venv), from
# policy/requirements.txt alone: policy/__main__.py finds infra/, bootstrap/ and the function's
# package in this checkout, not in the virtualenv.
POLICY_VENV := policy/venv
POLICY_STAMP := $(POLICY_VENV)/.installed
LINTED := function infra policy localrun bench bootstrap ops tools tests __main__.py

.PHONY: install lint lint-workflows typecheck check test test-runtime demo bench docs clean faketime

$(STAMP): $(REQUIREMENTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

$(POLICY_STAMP): policy/requirements.txt
	test -x $(POLICY_VENV)/bin/python || $(PYTHON) -m venv $(POLICY_VENV)
	$(POLICY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r policy/requirements.txt
	touch $(POLICY_STAMP)

# venv/ for the program, the tests and the ops CLI; policy/venv/ for the pack. Each is updated
# only when its requirements changed: a second `make install` does nothing.
install: $(STAMP) $(POLICY_STAMP)

lint: $(STAMP) lint-workflows
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

# The GitHub Actions workflows: actionlint (shellcheck on every run: script) and zizmor's
# security audits, both offline. Any finding, however minor, fails the build.
lint-workflows: $(STAMP)
	$(BIN)/actionlint -shellcheck=$(BIN)/shellcheck
	$(BIN)/zizmor --offline --no-progress .

typecheck: $(STAMP)
	$(BIN)/mypy $(LINTED)

# Your files against every rule `make test` holds them to (your stacks' config, timing,
# handlers and the policy pack under mocks; ruff and mypy on function/jobs/ and tests/jobs/),
# in seconds rather than the whole suite's minutes: run it after each edit.
check: $(STAMP)
	$(BIN)/python -m tools.fork_check

# libfaketime runs one function instance with its clock 120 s off in the clock-skew tests
# (Debian package faketime). As root (CI) it is installed, and a failure fails the build; any
# other user installs it through sudo when there is one, else is told that those tests will be
# skipped (they skip themselves without faketime) and how to install it.
FAKETIME_INSTALL := apt-get install -y faketime
FAKETIME_MISSING := faketime is not installed, so the clock-skew tests (tests/function/test_reliability.py) \
	will be skipped. To run them, install it: sudo $(FAKETIME_INSTALL) (Debian/Ubuntu), \
	or brew install libfaketime (macOS)
faketime:
	@command -v faketime >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ]; then \
		$(FAKETIME_INSTALL) || { apt-get update && $(FAKETIME_INSTALL); }; \
	elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then \
		sudo $(FAKETIME_INSTALL) || { sudo apt-get update && sudo $(FAKETIME_INSTALL); } \
			|| echo "$(FAKETIME_MISSING)"; \
	else \
		echo "$(FAKETIME_MISSING)"; \
	fi

# The tests start the Firestore emulator themselves on a free loopback port (or use
# FIRESTORE_EMULATOR_HOST when it is set) and stop it at the end.
test: faketime lint typecheck
	$(BIN)/python -m pytest
	$(MAKE) test-runtime

$(RUNTIME_VENV)/.installed: function/requirements.txt tests/requirements-function.txt
	@test -n "$(RUNTIME_PYTHON)" || { echo "python3.12 not found: the function's tests run on the python312 runtime's Python (install it, or set RUNTIME_PYTHON=...)"; exit 1; }
	test -x $(RUNTIME_VENV)/bin/python || $(RUNTIME_PYTHON) -m venv $(RUNTIME_VENV)
	$(RUNTIME_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r tests/requirements-function.txt
	touch $@

test-runtime: $(RUNTIME_VENV)/.installed
	$(RUNTIME_VENV)/bin/python --version
	$(RUNTIME_VENV)/bin/python -m pytest tests/function

# make itself exits 2 when a recipe fails, whatever the recipe's code; the demo's own exit code
# (docs/local-run.md: 1 not exactly once, 2 could not run, 3 the job failed terminally) is
# therefore named on the last line and kept in .demo/exit-code, and
# `venv/bin/python -m localrun.demo` exits with it directly.
demo: $(STAMP)
	@$(BIN)/python -m localrun.demo $(ARGS); code=$$?; mkdir -p .demo; echo $$code > .demo/exit-code; \
	if [ $$code -ne 0 ]; then echo "make demo: the demo exited with code $$code (.demo/exit-code)" >&2; fi; \
	exit $$code

bench: $(STAMP)
	$(BIN)/python -m bench.run $(ARGS)

# The reference tables in docs/ (config keys, jobs' fields, outputs, policies, outcomes, the
# function's environment), rewritten from the code between their GENERATED markers;
# tests/docs/ fails when a page differs from what this writes.
docs: $(STAMP)
	$(BIN)/python -m tools.docs_tables

clean:
	rm -rf $(VENV) $(RUNTIME_VENV) $(POLICY_VENV) .pytest_cache .mypy_cache .ruff_cache .demo
