# The two commands a newcomer needs: `make demo` and `make test`.
# Each creates .venv and installs what it needs first.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint install bytecode services clean bench

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

# An editable install caches no bytecode where PYTHONDONTWRITEBYTECODE is set (this machine's
# image sets it), so every process, each Ray worker included, would compile kiloRL's sources
# again (0.1-0.2 s of CPU per process). Compiled here as a wheel install would be; only
# changed files are compiled again, and a stale file is ignored by Python, never wrong.
bytecode: $(STAMP)
	@$(PY) -m compileall -q kilorl

# Trains PPO on CartPole-v1 locally, evaluates it, plots the curve.
demo: $(STAMP) bytecode
	$(PY) -m kilorl.demo

# System services the tests need (etcd, redis) come from Debian; see scripts/services.sh.
services:
	bash scripts/services.sh

# ruff (pinned in constraints.txt, configured in pyproject.toml) checks the whole tree first.
lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: $(STAMP) bytecode services lint
	$(PY) -m pytest -q tests

test-fast: $(STAMP) bytecode
	$(PY) -m pytest -q -m "not slow" tests

bench: $(STAMP) bytecode
	$(PY) -m pip install -q -c constraints.txt -e '.[bench]'

clean:
	rm -rf $(VENV) runs .pytest_cache
