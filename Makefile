# kintsugi: `make demo` sets up everything and serves the admin; `make test` runs the whole suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
APT_PACKAGES := chromium poppler-utils libharfbuzz-subset0 libpango-1.0-0 libpangoft2-1.0-0 fonts-dejavu-core

.PHONY: demo test test-fast bench docs stop system-deps venv ts-deps

# Python caches compiled modules unless told not to (some sandboxes set this): without the cache every
# process the tests start (each pytest worker, manage.py, gunicorn, Celery) compiles the project afresh.
unexport PYTHONDONTWRITEBYTECODE

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements.txt
	touch $@

venv: $(VENV)/.installed

# Debian libraries for WeasyPrint (PDF reports) and the browser the tests drive; skipped when present.
system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing Debian packages:$$missing (install them with apt-get)"; fi; \
	fi

# The TypeScript client's compiler and Node types (devDependencies, pinned in its package-lock.json): the
# suite type-checks the client's declarations under `strict`.
TS_CLIENT := clients/typescript
$(TS_CLIENT)/node_modules/.package-lock.json: $(TS_CLIENT)/package-lock.json
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund --silent

ts-deps: $(TS_CLIENT)/node_modules/.package-lock.json

demo: venv system-deps
	$(PY) -m kintsugi_site.demo

# The suite on every core and one more (pytest-xdist: each worker its own FalkorDB, test database and key
# prefixes; a module's tests stay on one worker, so its shared desk is built once). Much of a test's time
# is spent waiting on the servers, workers and browsers it started, so a third worker on two cores fills
# those waits. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile
# Compiled once before the workers start, so that on a fresh clone they do not each compile the same modules.
COMPILE := $(PY) -m compileall -q -j 0 core provenance repairs compensation kintsugi_site kintsugi_client bench examples tests

test: venv system-deps ts-deps
	$(VENV)/bin/lint-imports
	$(COMPILE)
	$(PY) -m pytest $(PYTEST_PARALLEL)

# What a developer runs between changes: everything but the benchmarks run end to end and the slowest tests.
test-fast: venv system-deps ts-deps
	$(COMPILE)
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not bench and not slow"

# The documentation site from docs/ (into .kintsugi/site), strict: a broken link fails it.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: venv
	$(PY) -m bench

stop: venv
	$(PY) -c "from core import embedded; embedded.stop_all()"
