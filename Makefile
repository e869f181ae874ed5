# skillevo — every target a user or CI needs. `make demo` and `make test` run `setup` themselves.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CLAUDE_CODE_VERSION := $(shell sed -n 's/^CLAUDE_CODE_VERSION = "\(.*\)"/\1/p' skillevo/pins.py)
CLAUDE_PREFIX := .tools/claude-code-$(CLAUDE_CODE_VERSION)
CLAUDE_BIN := $(CLAUDE_PREFIX)/node_modules/.bin/claude
export SKILLEVO_CLAUDE := $(abspath $(CLAUDE_BIN))
export DVC_NO_ANALYTICS := 1

.PHONY: setup system-packages demo test bench-session bench-cells clean
setup: system-packages $(VENV)/.installed $(CLAUDE_BIN)

# bwrap, socat (the model relay and Claude's inner sandbox), git, and Debian's python3 with pytest (what
# the demo tasks run inside the sandbox): installed with apt when we are root (CI, the image); otherwise
# the exact command is printed and setup stops.
system-packages:
	@missing=""; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v socat >/dev/null || missing="$$missing socat"; \
	command -v git >/dev/null || missing="$$missing git"; \
	/usr/bin/python3 -c 'import pytest' 2>/dev/null || missing="$$missing python3-pytest"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else \
	    echo "missing system packages:$$missing"; echo "run: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# The pinned CLI, project-local. Its postinstall copies the native binary in place, so scripts stay on.
$(CLAUDE_BIN): skillevo/pins.py
	mkdir -p $(CLAUDE_PREFIX)
	npm install --prefix $(CLAUDE_PREFIX) --no-fund --no-audit --loglevel=error @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)
	$(CLAUDE_BIN) --version | grep -q '^$(CLAUDE_CODE_VERSION) ' || { echo "installed CLI is not $(CLAUDE_CODE_VERSION)"; exit 1; }
	touch $@

demo: setup
	$(PY) -m skillevo.simulator.demo

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench-session: setup
	$(PY) -m benchmarks.session_overhead

bench-cells: setup
	$(PY) -m benchmarks.bench_cells $(if $(EXECUTOR),--executor $(EXECUTOR))

clean:
	rm -rf $(VENV) .tools .pytest_cache results/tmp
