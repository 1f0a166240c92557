# digest-stream developer commands. `make test` is what CI runs (through .ci/run).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Exports of the local stack (Kafka, Redis, Redis Cluster; the secured stack's stack.json) for
# every command that needs them.
STACK_ENV = eval "$$($(BIN)/digest-stream dev env)"

.PHONY: system-deps system-deps-demo venv lint stack-up stack-down stack-env test test-unit test-quick demo bench bench-quick bench-store chaos clean

# The system packages (Java, Maven, Redis, openssl, Prometheus, python3-venv), installed when
# missing, one line each saying why; where they cannot be installed, one line naming them.
system-deps:
	@PYTHON=$(PYTHON) bash scripts/system-deps.sh test

system-deps-demo:
	@PYTHON=$(PYTHON) bash scripts/system-deps.sh demo

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

stack-up: system-deps venv
	$(BIN)/digest-stream dev up --cluster --registry --secure

stack-down: venv
	$(BIN)/digest-stream dev down

stack-env: venv
	@$(BIN)/digest-stream dev env

# The broker-free tests (tests/unit): no stack, no Kafka, no Redis; a few seconds.
UNIT_ARGS = $(PYTEST_ARGS)
test-unit: venv
	$(BIN)/pytest tests/unit $(UNIT_ARGS)

# Everything: the unit slice first (a failure there stops before the stack starts), lint, then
# every test that needs the stack. PYTEST_ARGS (a path, -k) select within that last run only;
# the unit slice always runs whole.
# The Kafka Streams bench peer is built too, so that its test on the real broker runs, not skips.
test: UNIT_ARGS =
test: system-deps venv test-unit lint bench-peer-kstreams stack-up
	$(STACK_ENV) && $(BIN)/pytest --ignore=tests/unit $(PYTEST_ARGS)

# Everything but the slow end-to-end/chaos slices, for a quick loop while editing.
test-quick: venv stack-up
	$(STACK_ENV) && $(BIN)/pytest -m "not slow" $(PYTEST_ARGS)

bench-store: venv stack-up
	$(STACK_ENV) && $(BIN)/python -m bench.store_bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis *.egg-info

# Brings up (and at the end stops) Kafka and Redis only when no part of the stack was running.
demo: system-deps-demo venv
	bash scripts/demo.sh

# The fault-injection scenarios (about 32 min on 2 cores); figures appended to
# chaos-results.txt, one line per scenario (see docs/reliability.md). One scenario:
# make chaos PYTEST_ARGS="-k test_chaos_8_"; the backlog size: DIGEST_STREAM_CHAOS_BACKLOG.
chaos: venv stack-up
	$(STACK_ENV) && DIGEST_STREAM_CHAOS=1 DIGEST_STREAM_CHAOS_RESULTS=$(CURDIR)/chaos-results.txt \
		$(BIN)/pytest tests/chaos -m chaos -s $(PYTEST_ARGS)

# Benchmarks (docs/benchmarks.md). The Quix Streams peer of scenario 1c needs its own virtualenv:
# quixstreams pins pydantic<2.14 and confluent-kafka<2.13, which the service cannot use.
BENCH_PEER_VENV ?= $(HOME)/.cache/digest-stream/bench-peer-venv
QUIXSTREAMS_VERSION ?= 3.28.1

bench-peer-venv:
	@test -x $(BENCH_PEER_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_PEER_VENV)
	@$(BENCH_PEER_VENV)/bin/python -c 'import quixstreams' 2>/dev/null || \
		$(BENCH_PEER_VENV)/bin/python -m pip install -q 'quixstreams[avro]==$(QUIXSTREAMS_VERSION)'

# The Kafka Streams peer of scenario 7: a Java application built once with Maven
# (jars from Maven Central into ~/.m2; the build output, target/, is git-ignored).
KSTREAMS_PEER := bench/peers/kafka-streams
KSTREAMS_JAR := $(KSTREAMS_PEER)/target/kstreams-peer.jar

bench-peer-kstreams: $(KSTREAMS_JAR)

$(KSTREAMS_JAR): $(KSTREAMS_PEER)/pom.xml $(shell find $(KSTREAMS_PEER)/src -name '*.java')
	@command -v mvn >/dev/null || { echo "the Kafka Streams peer ($(KSTREAMS_PEER)) is built with Maven, and mvn is not on PATH: install Maven and a JDK 17 (apt-get install maven openjdk-17-jdk-headless)" >&2; exit 1; }
	@command -v java >/dev/null || { echo "the Kafka Streams peer needs a JDK 17, and java is not on PATH (apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
	cd $(KSTREAMS_PEER) && mvn -q -B -Dstyle.color=never package
	@touch $@  # mvn leaves an up-to-date jar's time alone; make compares against it

bench: venv stack-up bench-peer-venv bench-peer-kstreams
	$(STACK_ENV) && DIGEST_STREAM_BENCH_PEER_PYTHON=$(BENCH_PEER_VENV)/bin/python $(BIN)/python -m bench.run

bench-quick: venv stack-up bench-peer-venv bench-peer-kstreams
	$(STACK_ENV) && DIGEST_STREAM_BENCH_PEER_PYTHON=$(BENCH_PEER_VENV)/bin/python $(BIN)/python -m bench.run --quick

.PHONY: bench-peer-venv bench-peer-kstreams

# The `bench` extra (py-spy, for the sampled profile of scenario 6), installed once.
bench-deps: venv
	@test -x $(BIN)/py-spy || $(BIN)/python -m pip install -q -e '.[dev,bench]'

bench bench-quick: bench-deps
.PHONY: bench-deps
