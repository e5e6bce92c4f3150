# The two commands a user needs: `make demo` and `make test`. Everything else supports them.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# The source distribution of the pinned azure-functions-durable, whose samples-v2 the
# devhost's tests run unchanged (devhost/tests/integration/samples); from PyPI, never committed.
DURABLE_VERSION := $(shell sed -n 's/^azure-functions-durable==//p' requirements.in)
DURABLE_SAMPLES := .devhost/sdk-sources/azure_functions_durable-$(DURABLE_VERSION).tar.gz
# checkov runs in a venv of its own: its dependency pins conflict with the app's.
IAC_VENV := .venv-iac
CHECKOV := checkov==3.3.30

.PHONY: chromium lock setup test lint typecheck pytest bench bench-servicebus bench-pipeline demo chaos console servicebus emulators replay record-histories clean

setup: $(VENV)/.installed node_modules/.installed $(IAC_VENV)/.installed chromium $(DURABLE_SAMPLES)

# The app's lock first, on its own: pip checks every hash of a file that has one, and the
# editable devhost of requirements-dev.txt has none. The development packages then go on top;
# tests/package checks that they left every locked version as it was.
$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-worker.txt devhost/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes -r requirements.txt
	$(BIN)/pip install --quiet -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps --ignore-requires-python -r requirements-worker.txt
	touch $@

$(DURABLE_SAMPLES): requirements.in | $(VENV)/.installed
	$(BIN)/pip download --quiet --no-deps --no-binary :all: --dest $(dir $@) \
		azure-functions-durable==$(DURABLE_VERSION)

# requirements.txt, what the Functions remote build installs (Linux x86_64, Python 3.11): every
# package requirements.in names and every package those pull in, pinned, with the hashes of its
# files. Run after editing requirements.in; the lock changes only where the inputs did.
lock: $(VENV)/.installed
	$(BIN)/uv pip compile --quiet --generate-hashes --python-version 3.11 \
		--python-platform x86_64-manylinux_2_28 --custom-compile-command "make lock" \
		--output-file requirements.txt requirements.in

# checkov, the IaC scanner tests/infra runs over infra/ (its pin: CHECKOV above).
$(IAC_VENV)/.installed: Makefile
	$(PYTHON) -m venv $(IAC_VENV)
	$(IAC_VENV)/bin/pip install --quiet --upgrade pip
	$(IAC_VENV)/bin/pip install --quiet $(CHECKOV)
	touch $@

# The Cosmos DB API server (`@vercel/cosmosdb-server`) the Cosmos adapter is tested against,
# and playwright-core, which drives chromium in the console's browser test.
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Debian's chromium, which the operator console's browser test drives through playwright-core
# (tests/e2e/test_e2e_console_browser.py); installed with apt-get when missing (as root in CI,
# else through sudo).
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then as_root=; else as_root=sudo; fi; \
		$$as_root apt-get update -qq && \
		$$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

test: lint typecheck pytest

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

# The tests run in TEST_WORKERS processes (pytest-xdist), each test taken by the next free one;
# `make pytest TEST_WORKERS=0` runs them in this process, one after another.
TEST_WORKERS ?= 4
pytest: setup
	$(BIN)/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal)

# The order pipeline end to end on the embedded default: 200 orders, default fault mix.
# BACKEND=cosmos runs it on the Cosmos adapter against a local Cosmos DB API server it starts;
# without BACKEND, STATE_STORE and CosmosConnection from the environment decide (default sqlite).
# The run's stores, histories and broker journal stay in DEMO_DIR (started afresh each time)
# for `make console`; its traces and metrics in telemetry.jsonl, its report in report.json.
DEMO_DIR := .devhost/demo
demo: setup
	rm -rf $(DEMO_DIR)
	$(BIN)/python -m tools.demo $(if $(BACKEND),--backend $(BACKEND)) \
		--orders 200 --faults default --report report.json --telemetry-export telemetry.jsonl \
		--work-dir $(DEMO_DIR)

# The order pipeline under crashes and faults (tools/chaos/): 2,000 orders of the step workflow on
# the embedded default while the services inject faults, the devhosts, broker and services are
# killed with SIGKILL and restarted, a starter dies between claim and start and agent answers
# are lost, duplicated, delayed and reordered; exits non-zero on any broken invariant. Its
# report (invariants, faults and crashes with their times, recovery, timeline) in chaos.json.
# Options with ARGS, e.g. `make chaos ARGS="--orders 500 --seed 3"`.
chaos: setup
	$(BIN)/python -m tools.chaos --orders 2000 --report chaos.json $(ARGS)

# The operator console over the last `make demo`'s orders and dead letters (SQLite store):
# prints its URL with the function key and the act key (.../api/console?code=...#key=...);
# Ctrl-C stops.
console: setup
	$(BIN)/python -m tools.demo.console --work-dir $(DEMO_DIR)

# Throughput benchmarks (not tests; they print medians and a summary table): the broker's
# send + receive + complete rate (goal 2,000 msgs/s) and the fault-free pipeline, one-step
# (ORDER_STEPS=ship-order) and three-step workflow, at 1k and 5k orders (aims: 5k >= 0.9 x 1k,
# and with the agent as an activity three-step >= 0.5 x one-step orders/s; over the queue
# pair that ratio is a figure; about 15 minutes; tools/bench/README.md has the figures). Pass
# options with ARGS, e.g. `make bench-pipeline ARGS="--runs 1"` or `ARGS="--workflows
# three-step --sizes 1000"`;
# `ARGS="--sizes 1000 --agents servicebus,activity"` compares the two agent shapes (E1).
bench: setup
	$(BIN)/python -m tools.bench

bench-servicebus: setup
	$(BIN)/python -m tools.bench servicebus $(ARGS)

bench-pipeline: setup
	$(BIN)/python -m tools.bench pipeline $(ARGS)

# The replay gate (docs/replay.md): histories through the current orchestrator code, exit 0
# when all replay. Without ARGS the recorded ones; ARGS="--histories DIR" exported status
# files; ARGS="--scheduler ENDPOINT --task-hub HUB" a Durable Task Scheduler's in-flight ones.
replay: setup
	$(BIN)/python -m tools.replay $(ARGS)

# Records tests/replay_histories/v<WORKFLOW_VERSION>/ anew from two demo runs per agent shape
# (about 2 minutes). Only when a workflow version is added: older versions' folders stay.
record-histories: setup
	$(BIN)/python -m tools.replay.record

# The embedded broker on its own, with the app's queues; messages kept in .devhost/.
servicebus: setup
	mkdir -p .devhost
	$(BIN)/python -m devhost servicebus --port 5672 --config servicebus.config.json --data .devhost/servicebus.sqlite

# `func start` on the official emulators (docs/deployment.md, "With Core Tools and the official
# emulators"): starts emulators/compose.yaml when Docker Compose is installed and
# ACCEPT_EULA=Y is set (the Service Bus emulator's and SQL Edge's licence terms), then prints
# the steps that follow; otherwise prints every command.
EMULATORS_COMPOSE := docker compose -f emulators/compose.yaml
emulators:
	@if docker compose version >/dev/null 2>&1 && [ "$$ACCEPT_EULA" = Y ]; then \
		$(EMULATORS_COMPOSE) up -d || exit 1; \
	else \
		echo "1. ACCEPT_EULA=Y $(EMULATORS_COMPOSE) up -d"; \
	fi
	@echo "2. cp emulators/local.settings.emulators.json local.settings.json"
	@echo "3. $(BIN)/python -m tools.simulators.services --port 7072   (the remote services)"
	@echo "4. func start"
	@echo "Stop: $(EMULATORS_COMPOSE) down. Queues: emulators/servicebus-emulator.json,"
	@echo "made by python -m tools.emulators (messages expire after 1 hour, duplicates detected over 5 minutes)."

clean:
	rm -rf $(VENV) $(IAC_VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
