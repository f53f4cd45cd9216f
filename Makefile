# Two commands matter: `make demo` (see exactly-once work locally) and `make test`.
# Every target creates venv/ and installs the pinned requirements when they changed (without
# compiling every module of them: Python compiles and caches those it imports, a fraction);
# `make install` also prepares policy/venv/, the policy pack's own virtualenv, for
# `pulumi up --policy-pack policy`.
PYTHON ?= python3
# ...unless the environment says not to (PYTHONDONTWRITEBYTECODE, set on many CI machines): then
# every process the tests start (a function server, the ops CLI, a pytest worker) compiles each
# module it imports all over again, more than a second of CPU per function server on 3.12, and
# a third of the whole run's. The caches (__pycache__/) are ignored by git and left out of the
# function's source archive.
unexport PYTHONDONTWRITEBYTECODE
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
# policy/requirements.txt, whose pin of the function's distribution is installed from ./function
# (a copy, not editable: the pack imports nothing from this checkout outside policy/), and
# policy/requirements-test.txt for the pack's own tests.
POLICY_VENV := policy/venv
POLICY_STAMP := $(POLICY_VENV)/.installed
# `$(call checkout_has,PATHS)`: those of PATHS the checkout has as git sees them (a file tracked,
# or new and not ignored), as tools/optional_parts.py decides: `git rm -r` of an optional part
# leaves its compiled modules (__pycache__/, ignored), which do not keep it here. Outside a git
# checkout, those of PATHS that exist.
checkout_has = $(if $(shell git rev-parse --is-inside-work-tree 2>/dev/null),$(foreach path,$(1),$(if $(shell git ls-files --cached --others --exclude-standard -- $(path) | head -n 1),$(path))),$(wildcard $(1)))
# The optional parts a fork may delete (tools/optional_parts.py) are linted while they are here.
LINTED := function infra policy localrun ops tools tests __main__.py $(call checkout_has,bench bootstrap)
# `$(call optional,PATH,COMMAND)`: COMMAND when the optional part at PATH is in the checkout; in a
# fork that deleted it, a line saying so and success, so a CI job that still names it stays green.
optional = @if [ -n "$(call checkout_has,$(1))" ]; then echo '$(2)'; $(2); else echo "make $@: $(1) is not in this checkout (deleted as optional): nothing to run"; fi

.PHONY: install lint lint-workflows typecheck check format test-jobs test test-suite test-runtime test-pruned demo soak soak-short soak-model bench docs clean faketime browser

# pip runs --quiet (its hundreds of lines would bury a failure), so each step says first what
# it is about to do and how long that takes.
$(STAMP): $(REQUIREMENTS)
	@echo "$(VENV)/: installing the pinned requirements (requirements-dev.txt: the program, ops, the tests' tools); about a minute the first time, and pip prints nothing until it is done"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile -r requirements-dev.txt
	touch $(STAMP)
	@echo "$(VENV)/: installed"

$(POLICY_STAMP): policy/requirements.txt policy/requirements-test.txt function/pyproject.toml
	@echo "$(POLICY_VENV)/: installing the policy pack's own requirements (policy/requirements.txt), for pulumi up --policy-pack policy; pip prints nothing until it is done"
	test -x $(POLICY_VENV)/bin/python || $(PYTHON) -m venv $(POLICY_VENV)
	$(POLICY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-compile -r policy/requirements.txt -r policy/requirements-test.txt ./function
	touch $(POLICY_STAMP)
	@echo "$(POLICY_VENV)/: installed"

# venv/ for the program, the tests and the ops CLI; policy/venv/ for the pack. Each is updated
# only when its requirements changed: a second `make install` does nothing.
install: $(STAMP) $(POLICY_STAMP) faketime browser

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

# ruff's fixes and formatter on the files `make check` lints (function/jobs/, tests/jobs/):
# what it cannot fix is printed, and `make check` reports it.
format: $(STAMP)
	$(BIN)/python -m tools.fork_check --format

# Your own tests, in seconds rather than the whole suite's minutes: ruff and mypy on the files
# `make check` lints (tools/fork_check.py's YOUR_CODE), then pytest on tests/jobs/ alone
# (ARGS="-k name" picks some). One pytest process without workers, so the Firestore emulator
# starts only for a test that asks for it (the `emulator_host` fixture, tests/conftest.py), and a
# unit test needs neither Java nor gcloud. pytest's "no tests collected" (5) is a fork that has
# written none yet, not a failure.
YOUR_CODE := function/jobs tests/jobs
test-jobs: $(STAMP)
	$(BIN)/ruff check $(YOUR_CODE)
	$(BIN)/ruff format --check $(YOUR_CODE)
	$(BIN)/mypy $(YOUR_CODE)
	@echo '$(BIN)/python -m pytest tests/jobs $(ARGS)'; $(BIN)/python -m pytest tests/jobs $(ARGS); code=$$?; \
	if [ $$code -eq 5 ]; then echo "make test-jobs: tests/jobs/ holds no tests yet"; exit 0; fi; exit $$code

# Debian packages some tests need, installed like this: as root (CI), and a failure fails the
# build; any other user through sudo when there is one, else told which tests will be skipped
# (they skip themselves without the package) and how to install it.
# `$(call debian_package,COMMAND,PACKAGE,MISSING)`: PACKAGE unless COMMAND is on PATH.
define debian_package
@command -v $(1) >/dev/null && exit 0; \
if [ "$$(id -u)" = 0 ]; then \
	apt-get install -y $(2) || { apt-get update && apt-get install -y $(2); }; \
elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then \
	sudo apt-get install -y $(2) || { sudo apt-get update && sudo apt-get install -y $(2); } \
		|| echo "$(3)"; \
else \
	echo "$(3)"; \
fi
endef

# libfaketime runs one function instance with its clock 120 s off in the clock-skew tests.
FAKETIME_MISSING := faketime is not installed, so the clock-skew tests (tests/function/test_reliability.py) \
	will be skipped. To run them, install it: sudo apt-get install -y faketime (Debian/Ubuntu), \
	or brew install libfaketime (macOS)
faketime:
	$(call debian_package,faketime,faketime,$(FAKETIME_MISSING))

# Headless Chromium renders the stack's page (`python -m ops page`) in tests/ops/test_page.py.
CHROMIUM_MISSING := chromium is not installed, so the page rendering test (tests/ops/test_page.py) \
	will be skipped. To run it, install it: sudo apt-get install -y chromium (Debian/Ubuntu)
browser:
	$(call debian_package,chromium,chromium,$(CHROMIUM_MISSING))

# `make test` runs the linters, mypy and both test runs at once (and installs the two
# virtualenvs at once first), each target's output printed whole when it ends: the tests spend
# much of their time waiting (on function servers, leases, the emulator), and the rest fills it.
#
# tests/function runs on two Pythons, side by side. On 3.12 (`test-runtime`), the python312
# Cloud Run runtime's Python the function is deployed on, all of it. On 3.11, with the whole
# suite (`test-suite`), because the function's package supports Python 3.11 and newer
# (function/pyproject.toml): every test of the package's code in process, but not the tests
# marked `served` (tests/conftest.py), which serve the deployed function through real servers
# and spend most of the suite's time waiting on its leases; running them twice would cost every
# push about four minutes of CI, for the one Python the function is not deployed on.
#
# The tests start the Firestore emulator themselves on a free loopback port (or use
# FIRESTORE_EMULATOR_HOST when it is set) and stop it at the end. Each run has pytest-xdist
# workers, more than the machine's cores (the tests wait as much as they compute), and one
# emulator its workers share (tests/conftest.py). LOCALRUN_PORT_SHARE gives each run, and in
# it each worker, its own share of the free ports, so two launchers never pick the same one
# (four shares: the two test runs here, and the demo and the short soak CI runs beside them);
# a port taken anyway by a process that picks no share (the emulator's Java binds three of
# its own choosing) sends the launcher to another (localrun/port_holder.py).
TEST_WORKERS ?= 6
RUNTIME_TEST_WORKERS ?= 3
# A module's tests stay on one worker, which builds the module's fixtures once (a virtualenv,
# a Pulumi program's run); the modules go to whichever worker is free, in collection order,
# where the modules marked slow_module come first (tests/conftest.py). The 30 slowest tests
# are listed at the end of each run, where a newly slow one shows.
PYTEST_PARALLEL = --dist loadfile --no-loadscope-reorder --durations=30

test: faketime browser
	$(MAKE) --no-print-directory --keep-going --jobs=4 --output-sync=target test-suite test-runtime typecheck lint

# The pack's own virtualenv too: a test loads the pack in it, as `pulumi up --policy-pack` does.
#
# Every worker imports every test module and what they import. Started together in a fresh
# clone, each would compile all of those itself (the repository's modules, pytest's rewrite of
# each test module, and the libraries pip installed without compiling them): one collection
# first compiles them once for all of them, 20 CPU-s less for six workers with the libraries
# compiled already, more in CI. Its output and verdict are the test run's to give.
test-suite: $(STAMP) $(POLICY_STAMP)
	$(BIN)/python -m pytest --collect-only -q -p no:cacheprovider -m 'not served' >/dev/null || true
	LOCALRUN_PORT_SHARE=0/4 $(BIN)/python -m pytest -n $(TEST_WORKERS) -m 'not served' $(PYTEST_PARALLEL)

$(RUNTIME_VENV)/.installed: function/requirements.txt tests/requirements-function.txt
	@test -n "$(RUNTIME_PYTHON)" || { echo "python3.12 not found: the function's tests run on the python312 runtime's Python (install it, or set RUNTIME_PYTHON=...)"; exit 1; }
	test -x $(RUNTIME_VENV)/bin/python || $(RUNTIME_PYTHON) -m venv $(RUNTIME_VENV)
	$(RUNTIME_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-compile -r tests/requirements-function.txt
	touch $@

test-runtime: $(RUNTIME_VENV)/.installed
	$(RUNTIME_VENV)/bin/python --version
	LOCALRUN_PORT_SHARE=1/4 $(RUNTIME_VENV)/bin/python -m pytest tests/function -n $(RUNTIME_TEST_WORKERS) $(PYTEST_PARALLEL)

# make itself exits 2 when a recipe fails, whatever the recipe's code; the demo's own exit code
# (docs/local-run.md: 1 not exactly once, 2 could not run, 3 the job failed terminally) is
# therefore named on the last line and kept in .demo/exit-code, and
# `venv/bin/python -m localrun.demo` exits with it directly.
demo: $(STAMP)
	@$(BIN)/python -m localrun.demo $(ARGS); code=$$?; mkdir -p .demo; echo $$code > .demo/exit-code; \
	if [ $$code -ne 0 ]; then echo "make demo: the demo exited with code $$code (.demo/exit-code)" >&2; fi; \
	exit $$code

# Thousands of runs of several jobs under every fault kind, drawn from a seed, counted by an
# independent checker (docs/local-run.md#the-soak): exit code 1 names each run executed twice
# or lost, with its seed and fault schedule; `ARGS="--seed S --only RUN"` replays one run.
soak: $(STAMP) faketime
	$(call optional,localrun/soak,$(BIN)/python -m localrun.soak $(ARGS))

# The short soak every CI run pays for, about a minute: 300 runs, a fixed seed, every
# fault kind but the forced run (whose scheduled delivery waits up to a minute and a half for
# its ScheduleTime, the whole budget again); `make soak` injects that one too.
soak-short: $(STAMP) faketime
	$(call optional,localrun/soak,$(BIN)/python -m localrun.soak --runs 300 --seed 3 --min-each 3 --no-forced)

# The model-based test of the run lifecycle (tests/function/ledger/test_lifecycle_model.py) on
# its long profile: thousands of step sequences drawn from a random seed, printed first, instead
# of `make test`'s fixed minute of them. A failure prints its shortest sequence, and is kept in
# .hypothesis/ (not versioned) so the next run tries it first; LIFECYCLE_MODEL_SEED=<seed>
# replays a whole run.
soak-model: $(STAMP)
	LIFECYCLE_MODEL_PROFILE=soak $(BIN)/python -m pytest tests/function/ledger/test_lifecycle_model.py -s $(ARGS)

bench: $(STAMP)
	$(call optional,bench,$(BIN)/python -m bench.run $(ARGS))

# The reference tables in docs/ (config keys, jobs' fields, outputs, policies, outcomes, the
# function's environment), rewritten from the code between their GENERATED markers;
# tests/docs/ fails when a page differs from what this writes.
docs: $(STAMP)
	$(BIN)/python -m tools.docs_tables

# All of `make test` on a copy of this checkout without the optional parts (.pruned/, sharing
# these virtualenvs): what a fork that deleted them runs. `make test` itself only imports,
# checks, lints and demos such a copy (tests/test_fork_prune.py); this takes as long again.
test-pruned: $(STAMP)
	$(BIN)/python -m tools.pruned_checkout .pruned
	$(MAKE) -C .pruned test

clean:
	rm -rf $(VENV) $(RUNTIME_VENV) $(POLICY_VENV) .pytest_cache .mypy_cache .ruff_cache .demo .soak .pruned
