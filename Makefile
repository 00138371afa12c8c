# semel: `make run` starts a broker on 127.0.0.1:9092 with data in ./data;
# `make test` runs the test suite. Both create the virtual environment .venv on first use.
# Installs are remembered by stamp files in .venv/ and redone only when pyproject.toml changes.

PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 9092
DATA_DIR ?= ./data
PYTEST_ARGS ?= -q
BENCH_ARGS ?=
BENCH_BASELINE ?=
BENCH_CLEANER_ARGS ?=
BENCH_SPARK_ARGS ?=
CHAOS_DURATION ?= 1800
CHAOS_ARGS ?=
HOSTILE_DURATION ?= 1800
HOSTILE_ARGS ?=
IMAGE ?= localhost/semel:dev
BASE_IMAGE ?= localhost/semel-base:bookworm

.PHONY: run test test-deps jars bench bench-cleaner bench-spark protocol lint chaos hostile \
	pipeline dist image

$(VPY):
	$(PY) -m venv $(VENV)

# Byte-compile our packages (only what changed) before anything starts brokers: start-up stays
# fast even where PYTHONDONTWRITEBYTECODE is set
COMPILE := $(VPY) -m compileall -q broker protocol storage coordinator

# the optional C record walker is built by the install: a change to it reinstalls
NATIVE := protocol/_recordwalk.c

$(VENV)/.installed: pyproject.toml $(NATIVE) | $(VPY)
	$(VPY) -m pip install -q -e .
	$(COMPILE)
	touch $@

# the tests include the Spark connector's (pipelines/spark): PySpark comes with them
$(VENV)/.installed-test: pyproject.toml $(NATIVE) | $(VPY)
	$(VPY) -m pip install -q -e '.[test,spark]'
	touch $@

$(VENV)/.installed-specs: pyproject.toml | $(VPY)
	$(VPY) -m pip install -q -e '.[specs]'
	touch $@

run: $(VENV)/.installed
	@$(COMPILE)
	$(VPY) -m semel.broker serve --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR)

# Java kafka-clients jars for the Java client tests, into .cache/java-jars/ (quick when present)
jars: | $(VPY)
	$(VPY) tests/tools/fetch_java_jars.py >/dev/null

test-deps: $(VENV)/.installed-test jars

test: test-deps
	@$(COMPILE)
	$(VPY) -m pytest $(PYTEST_ARGS)

# long chaos run (tests/chaos/README.md): CHAOS_DURATION seconds of mixed faults, then the
# checker; histories under tests/chaos/out/
chaos: test-deps
	@$(COMPILE)
	$(VPY) -m tests.chaos.runner --profile long --duration $(CHAOS_DURATION) $(CHAOS_ARGS)

# long hostile-client soak (tests/hostile/README.md): HOSTILE_DURATION seconds of hostile
# clients against the broker while real clients copy exactly once; results in tests/hostile/out/
hostile: test-deps
	@$(COMPILE)
	$(VPY) -m tests.hostile.soak --profile long --duration $(HOSTILE_DURATION) $(HOSTILE_ARGS)

$(VENV)/.installed-bench: pyproject.toml $(NATIVE) | $(VPY)
	$(VPY) -m pip install -q -e '.[bench]'
	touch $@

# semel side by side with the peer broker (Tansu, fetched into .cache/peer/ on first use);
# writes docs/BENCHMARKS.md and docs/benchmarks.png, raw results under bench/results/.
# BENCH_ARGS=--quick for a run of a few minutes, BENCH_ARGS=--smoke for a few seconds.
# BENCH_BASELINE=<git ref>: instead, what this working tree costs against that ref, in paired
# runs of the produce rows (bench/bench_ab.py; table in bench/results/<time>-ab/AB.md).
bench: $(VENV)/.installed-bench
	@$(COMPILE)
	$(VPY) bench/run.py $(if $(BENCH_BASELINE),--baseline $(BENCH_BASELINE)) $(BENCH_ARGS)

# the log cleaner (bench/bench_cleaner.py, ~10 min): internal topics after 100,000 offset
# commits and 20,000 transactions (sizes, load times, cleaning MB/s, the cleaner's memory),
# then make bench's produce-1k-1p in pairs with the cleaner idle and busy
bench-cleaner: $(VENV)/.installed-bench
	@$(COMPILE)
	$(VPY) bench/bench_cleaner.py $(BENCH_CLEANER_ARGS)

$(VENV)/.installed-spark: pyproject.toml $(NATIVE) | $(VPY)
	$(VPY) -m pip install -q -e '.[spark]'
	touch $@

# the PySpark connector's speed (bench/bench_spark.py, ~5 min; Java 17+): Spark reads (count,
# sum(length(value))) and exactly-once writes of 1 GiB of 1 KiB records and 128 MiB of 100 B
# ones on a durable semel, against one plain confluent-kafka consumer / idempotent /
# transactional producer; broker and client CPU per phase, py-spy of the Python workers,
# cProfile of read_range and TaskWriter.write. BENCH_SPARK_ARGS=--quick for ~1 min.
# Results in bench/results/<time>-spark/RESULTS.md
bench-spark: $(VENV)/.installed-bench $(VENV)/.installed-spark
	@$(COMPILE)
	$(VPY) bench/bench_spark.py $(BENCH_SPARK_ARGS)

# the example exactly-once pipeline (pipelines/example): a fresh semel, orders from a
# transactional producer (some transactions aborted), the PySpark job run twice from one
# checkpoint on local Spark (needs Java 17+); one summary line, non-zero on any mismatch
pipeline: $(VENV)/.installed-spark
	@$(COMPILE)
	$(VPY) -m semel.pipelines.example --demo

protocol: $(VENV)/.installed-specs jars
	$(VPY) -m semel.protocol.codegen

lint: $(VENV)/.installed-test
	$(VPY) -m ruff check .

# `python -m build` alone, for `make dist` (the range of pyproject's test extra)
$(VENV)/.installed-build: pyproject.toml | $(VPY)
	$(VPY) -m pip install -q 'build>=1.2,<2'
	touch $@

# the sdist and the wheel built from it (python -m build), into dist/
dist: $(VENV)/.installed-build
	rm -rf dist
	$(VPY) -m build --outdir dist .

# the container image IMAGE with podman, no network inside the build (docker/build_image.sh):
# the wheelhouse (pip wheel . -w docker/wheelhouse), the base image when BASE_IMAGE is the
# default, made once per machine with debootstrap from apt's Debian mirror (root; cached in
# .cache/semel-base/), then podman build. BASE_IMAGE=docker.io/library/python:3.11-slim
# where a registry is reachable. README, "In a container", says how to run it.
image: | $(VPY)
	IMAGE=$(IMAGE) BASE_IMAGE=$(BASE_IMAGE) PYTHON=$(VPY) docker/build_image.sh
