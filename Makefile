# Everyday commands. `make run` and `make test` need nothing but Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
export FLASK_APP := wsgi
# `make run PORT=8080` when 5000 is taken.
PORT ?= 5000

.PHONY: install run test test-browser fuzz lint format bench bench-instructions bench-parts clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

run: install  ## migrate, load demo data, serve on http://127.0.0.1:$(PORT) with an outbox worker
	$(BIN)/flask db upgrade
	$(BIN)/flask seed-demo
	@# The worker delivers queued mail (to the log, without MAIL_SERVER); it stops with the
	@# server. The trap signals the worker alone, once: `kill 0` signalled this shell too,
	@# which ran the trap again, and again, until it crashed.
	MAIL_LOG_FILE=instance/mail.log $(BIN)/flask outbox worker --interval 2 & worker=$$!; \
		trap 'trap - INT TERM EXIT; kill $$worker 2>/dev/null' INT TERM EXIT; \
		$(BIN)/flask run --host 127.0.0.1 --port $(PORT)

test: install  ## the whole suite on SQLite (set TEST_DATABASE_URL / TEST_REDIS_URL for more)
	$(BIN)/python -m pytest

fuzz: install  ## Schemathesis against every operation, 500 examples each (FUZZ_SEED=… to vary)
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-500} FUZZ_COVERAGE=1 $(BIN)/python -m pytest tests/test_fuzz.py -p no:randomly

test-browser: install  ## headless Chromium against a live server (apt-get install -y chromium)
	REQUIRE_BROWSER=1 $(BIN)/python -m pytest tests/test_browser.py -v

bench: install  ## load gunicorn with wrk on SQLite and PostgreSQL + Redis; writes bench/RESULTS.md
	$(BIN)/python bench/run.py

bench-instructions: install  ## callgrind instructions per request, every scenario (minutes); writes bench/INSTRUCTIONS.md
	$(BIN)/python bench/instructions.py

bench-parts: install  ## where those instructions go, by part of the request (minutes); writes bench/PARTS.md
	$(BIN)/python bench/instructions.py --parts --databases sqlite postgresql

lint: install  ## ruff, and the layers' contract (import-linter, in setup.cfg)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) instance .pytest_cache .ruff_cache *.egg-info
