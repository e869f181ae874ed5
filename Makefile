# skillevo — every target a user or CI needs. `make demo` and `make test` run `setup` themselves.
SHELL := /bin/bash
PYTHON ?= python3
# VENV and TOOLS may point at an existing environment (a second clone, CI caches): setup is keyed on
# content, so a matching environment is reused as it is.
VENV ?= .venv
TOOLS ?= .tools
PY := $(VENV)/bin/python
CLAUDE_CODE_VERSION := $(shell sed -n 's/^CLAUDE_CODE_VERSION = "\(.*\)"/\1/p' skillevo/pins.py)
CLAUDE_PREFIX := $(TOOLS)/claude-code-$(CLAUDE_CODE_VERSION)
CLAUDE_BIN := $(CLAUDE_PREFIX)/node_modules/.bin/claude
INSTALLED := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-16)
# DVC runs stage commands with this PATH: `python` in dvc.yaml is the project's.
export PATH := $(abspath $(VENV))/bin:$(PATH)
export SKILLEVO_CLAUDE := $(abspath $(CLAUDE_BIN))
export DVC_NO_ANALYTICS := 1

.PHONY: setup system-packages demo repro apply revert evolve report push pull session-demo test bench-session bench-cells bench-pipeline clean
setup: system-packages $(INSTALLED) $(CLAUDE_BIN)

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

$(INSTALLED):
	@case "$(abspath $(VENV))/" in "$(CURDIR)"/*) ;; *) if [ -x "$(PY)" ]; then \
	  echo "$(VENV) is another checkout's environment, set up for a different pyproject.toml:"; \
	  echo "run 'make setup' in that checkout (an editable install here would take it over)"; exit 1; fi;; esac
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

# The pinned CLI, project-local. Its postinstall copies the native binary in place, so scripts stay on.
$(CLAUDE_BIN):
	mkdir -p $(CLAUDE_PREFIX)
	npm install --prefix $(CLAUDE_PREFIX) --no-fund --no-audit --loglevel=error @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)
	$(CLAUDE_BIN) --version | grep -q '^$(CLAUDE_CODE_VERSION) ' || { echo "installed CLI is not $(CLAUDE_CODE_VERSION)"; exit 1; }
	touch $@

DVC := $(VENV)/bin/dvc
GENERATIONS ?= 1

# One simulated generation: dvc repro, then the decision and where to read it.
demo: setup
	$(DVC) repro
	@$(PY) -m skillevo.generations status

repro: setup
	$(DVC) repro

apply: setup
	$(PY) -m stages.apply

revert: setup
	$(PY) -m stages.apply --revert

evolve: setup
	$(PY) -m skillevo.generations evolve --generations $(GENERATIONS) --dvc $(DVC)

report: setup
	@$(PY) -m skillevo.generations report

push: setup
	$(DVC) push --run-cache

pull: setup
	$(DVC) pull --run-cache

# A single sandboxed session against the simulator, for a quick check of the machine.
session-demo: setup
	$(PY) -m skillevo.simulator.demo

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench-session: setup
	$(PY) -m benchmarks.session_overhead

bench-pipeline: setup
	$(PY) -m benchmarks.pipeline_walls

bench-cells: setup
	$(PY) -m benchmarks.bench_cells $(if $(EXECUTOR),--executor $(EXECUTOR))

clean:
	rm -rf $(VENV) .tools .pytest_cache results
