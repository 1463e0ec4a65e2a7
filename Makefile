# The two commands of README.md. Both create .venv on first use: `run` installs what a night needs, `test` adds
# what the tests start (a real MLflow server, a Ray cluster, a browser, pytest).
VENV ?= .venv
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: run test lint live-check

# One experiment against the real service (costs a few cents; needs its key): make live-check MODEL=openai:gpt-6.2-sol
MODEL ?= anthropic:claude-opus-5-5

run: $(STAMP)
	bash scripts/debian_packages.sh bwrap "runs will not be isolated" bubblewrap
	$(VENV)/bin/autoresearch run --tag demo --track cpu --max-experiments 3 --parallel 2

test: $(DEV_STAMP)
	bash scripts/debian_packages.sh bwrap "runs will not be isolated" bubblewrap
	bash scripts/debian_packages.sh chromium "the browser test of the report will be skipped" chromium
	bash scripts/coding_clis.sh
	bash scripts/skypilot_venv.sh
	bash scripts/test_docker.sh
	$(VENV)/bin/python -m pytest -q

live-check: $(DEV_STAMP)
	AUTORESEARCH_LIVE_MODEL=$(MODEL) $(VENV)/bin/python -m pytest -q -rs -s tests/live

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check .

$(STAMP): pyproject.toml scripts/setup_venv.sh
	bash scripts/setup_venv.sh $(VENV) train
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	bash scripts/setup_venv.sh $(VENV) train,dev
	touch $(DEV_STAMP)
