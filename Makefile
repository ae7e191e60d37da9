# The two commands a newcomer needs: `make demo` and `make test`. Both start from a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test unit kafka-jars bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Apache Kafka's own jars, resolved by Maven into .cache/kafka (the broker for demo and tests).
kafka-jars: $(STAMP)
	$(PY) -c 'from streamer.broker import ensure_jars; print(ensure_jars())'

demo: kafka-jars
	$(VENV)/bin/streamer demo $(if $(EVENTS),--events $(EVENTS))

test: kafka-jars
	$(PY) -m pytest -q

unit: $(STAMP)
	$(PY) -m pytest -q -m 'not kafka'

bench: kafka-jars
	$(PY) benchmarks/throughput.py

clean:
	rm -rf $(VENV) .cache .pytest_cache
