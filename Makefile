# The two commands of README.md. Both create .venv on first use.
VENV ?= .venv
STAMP := $(VENV)/.installed

.PHONY: run test lint live-check

# One experiment against the real service (costs a few cents; needs its key): make live-check MODEL=openai:gpt-6.2-sol
MODEL ?= anthropic:claude-opus-5-5

run: $(STAMP)
	bash scripts/debian_packages.sh bwrap "runs will not be isolated" bubblewrap
	$(VENV)/bin/autoresearch run --tag demo --track cpu --max-experiments 3 --parallel 2

test: $(STAMP)
	bash scripts/debian_packages.sh bwrap "runs will not be isolated" bubblewrap
	bash scripts/debian_packages.sh chromium "the browser test of the report will be skipped" chromium
	bash scripts/coding_clis.sh
	bash scripts/skypilot_venv.sh
	bash scripts/test_docker.sh
	$(VENV)/bin/python -m pytest -q

live-check: $(STAMP)
	AUTORESEARCH_LIVE_MODEL=$(MODEL) $(VENV)/bin/python -m pytest -q -rs -s tests/live

lint: $(STAMP)
	$(VENV)/bin/ruff check .

$(STAMP): pyproject.toml scripts/setup_venv.sh
	bash scripts/setup_venv.sh $(VENV)
	touch $(STAMP)
