# Exactly: developer entry points. Everything runs from the virtualenv in $(VENV).

VENV ?= .venv
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
PYTEST_ARGS ?=
# ruff checks all the Python here; mypy the package and the test rigs
# (tests/integration/test_lint.py runs both in make test).
RUFF_PATHS := src bench tests
MYPY_PATHS := src/exactly tests/rigs

# The stamp's name carries a hash of pyproject.toml: a changed dependency list reinstalls,
# an unchanged one makes `make venv` a no-op (git checkouts reset mtimes, hashes survive).
PYPROJECT_HASH := $(shell sha256sum pyproject.toml | cut -c1-16)
STAMP := $(VENV)/.exactly-installed-$(PYPROJECT_HASH)

.PHONY: venv test check demo bench lint system-deps-test system-deps-demo kafka-deps
# Prerequisites run in the order written: the system set-up step comes before anything else.
.NOTPARALLEL:

venv: $(STAMP)

$(STAMP):
	@test -x $(VENV)/bin/python || { echo "creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@rm -f $(VENV)/.exactly-installed-*
	@touch $@

# The system set-up step (scripts/system-deps.sh, also run by .ci/run): the Debian packages the
# tests or the demo need, installed with apt-get as root, otherwise named with the command that
# installs them. SKIP_SYSTEM_DEPS=1 goes on without them.
SKIP_SYSTEM_DEPS ?=
system-deps-test system-deps-demo:
	@if [ "$(SKIP_SYSTEM_DEPS)" != 1 ]; then bash scripts/system-deps.sh $(@:system-deps-%=%); fi

# Apache Kafka 4.4 from Maven Central (interop/jvm/pom.xml) into the Maven cache, and the
# classpath tests.rigs.kafka starts it with; a no-op once resolved.
kafka-deps:
	@bash scripts/kafka-deps.sh

# The suite runs in two parts: most tests on PYTEST_WORKERS pytest-xdist workers (they mostly
# wait on broker processes and Spark JVMs, so three share two cores well; tests marked
# xdist_group run together on one worker, to share a module-scoped process), then the tests marked
# `serial`, which measure the broker's memory or latency, compare answers with Apache Kafka's
# (the conformance corpus) or run Spark beside a Kafka cluster, alone. PYTEST_WORKERS=0 runs the first
# part in one process too.
# Exit code 5 ("no tests collected") of one part is fine when the other ran tests;
# ALLOW_NO_TESTS=1 (CI) also accepts it from both.
PYTEST_WORKERS ?= 3
test: system-deps-test kafka-deps venv
	@rc1=0; rc2=0; \
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "not serial" --durations=30 \
		$(PYTEST_ARGS) || rc1=$$?; \
	$(VENV)/bin/pytest -q -m serial $(PYTEST_ARGS) || rc2=$$?; \
	if [ $$rc1 -eq 5 ] && [ $$rc2 -eq 5 ]; then rc=5; \
	elif [ $$rc1 -eq 5 ] || [ $$rc1 -eq 0 ]; then rc=$$rc2; [ $$rc -eq 5 ] && rc=0; \
	else rc=$$rc1; fi; \
	if [ $$rc -eq 5 ] && [ "$(ALLOW_NO_TESTS)" = 1 ]; then \
		echo "pytest collected no tests (exit 5): treated as success"; rc=0; \
	fi; exit $$rc

# A quick answer for developers (about 2 minutes on 2 cores): ruff over everything, mypy over the
# package, then the unit tier (tests/unit: no process and no socket, which its conftest refuses):
# the protocol codecs, the log, the sans-IO coordinators, the client's state machines and the
# import layering. `make test` runs every tier; `make test PYTEST_ARGS=tests/integration` one.
check: venv
	$(VENV)/bin/ruff check $(RUFF_PATHS)
	$(VENV)/bin/mypy $(MYPY_PATHS)
	$(VENV)/bin/pytest -q -n 2 tests/unit $(PYTEST_ARGS)

demo: system-deps-demo venv
	$(VENV)/bin/exactly demo $(DEMO_ARGS)

bench: venv
	$(VENV)/bin/python bench/run.py

lint: venv
	$(VENV)/bin/ruff check $(RUFF_PATHS)
	$(VENV)/bin/mypy $(MYPY_PATHS)
