# The two commands a user needs: `make demo` and `make test`. Everything else supports them.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup test lint typecheck pytest bench demo servicebus clean

setup: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@

# The Cosmos DB API server the Cosmos adapter is tested against (issue 5).
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

test: lint typecheck pytest

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

pytest: setup
	$(BIN)/python -m pytest

# The order pipeline end to end on the embedded default: 200 orders, default fault mix.
demo: setup
	$(BIN)/python -m devhost demo --orders 200 --faults default --report report.json

bench: setup
	$(BIN)/python -m bench.servicebus_throughput

servicebus: setup
	$(BIN)/python -m devhost servicebus --port 5672 --config devhost/servicebus/default-config.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
