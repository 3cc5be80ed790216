# The two commands a newcomer needs: `make demo` and `make test`.
# Each creates .venv and installs what it needs first.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint install services clean bench

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

# Trains PPO on CartPole-v1 locally, evaluates it, plots the curve.
demo: $(STAMP)
	$(PY) -m kilorl.demo

# System services the tests need (etcd, redis) come from Debian; see scripts/services.sh.
services:
	bash scripts/services.sh

# ruff (pinned in constraints.txt, configured in pyproject.toml) checks the whole tree first.
lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: $(STAMP) services lint
	$(PY) -m pytest -q tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests

bench: $(STAMP)
	$(PY) -m pip install -q -c constraints.txt -e '.[bench]'

clean:
	rm -rf $(VENV) runs .pytest_cache
