# skillevo — every target a user or CI needs. `make demo` and `make test` run `setup` themselves.
SHELL := /bin/bash
PYTHON ?= python3
# VENV and TOOLS may point at an existing environment (a second clone, CI caches): setup is keyed on
# content, so a matching environment is reused as it is.
VENV ?= .venv
TOOLS ?= .tools
PY := $(VENV)/bin/python
CLAUDE_CODE_VERSION := $(shell sed -n 's/^CLAUDE_CODE_VERSION = "\(.*\)"/\1/p' skillevo/core/pins.py)
CLAUDE_PREFIX := $(TOOLS)/claude-code-$(CLAUDE_CODE_VERSION)
CLAUDE_BIN := $(CLAUDE_PREFIX)/node_modules/.bin/claude
# What each setup installs into the venv: the demo needs the package alone; `make test` and `lint` add the dev
# tools (the `dev` extra); `make test-full` and the image add Ray (the `ray` extra). Each is stamped by the content
# of pyproject.toml, and a larger install stands for a smaller one.
PYPROJECT := $(shell sha256sum pyproject.toml | cut -c1-16)
EXTRAS_demo :=
EXTRAS_test := [dev]
EXTRAS_full := [dev,ray,gateway]
EXTRAS_gateway := [gateway]
STAMP = $(VENV)/.installed-$(PYPROJECT)-$(1)
INSTALLED := $(call STAMP,full)# the image's (Dockerfile): everything
# DVC runs stage commands with this PATH: `python` in dvc.yaml is the project's.
export PATH := $(abspath $(VENV))/bin:$(PATH)
export SKILLEVO_CLAUDE := $(abspath $(CLAUDE_BIN))
export DVC_NO_ANALYTICS := 1

.PHONY: setup setup-test setup-full setup-gateway system-packages demo repro check apply revert evolve report push pull gc session-demo lint test test-full bench-session bench-cells bench-pipeline gate-study demo-seeds bench-economy gate-study-simulator plots modes clean
setup: system-packages $(call STAMP,demo) $(CLAUDE_BIN)
setup-test: system-packages $(call STAMP,test) $(CLAUDE_BIN)
setup-full: system-packages $(call STAMP,full) $(CLAUDE_BIN)
setup-gateway: system-packages $(call STAMP,gateway) $(CLAUDE_BIN)

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

$(VENV)/.installed-$(PYPROJECT)-%:
	@if [ -e "$(call STAMP,full)" ] || { [ "$*" = demo ] && [ -e "$(call STAMP,test)" ]; }; then \
	  touch $@; exit 0; fi; \
	case "$(abspath $(VENV))/" in "$(CURDIR)"/*) ;; *) if [ -x "$(PY)" ]; then \
	  echo "$(VENV) is another checkout's environment, set up for a different pyproject.toml:"; \
	  echo "run 'make setup' in that checkout (an editable install here would take it over)"; exit 1; fi;; esac; \
	set -e; \
	[ -x "$(PY)" ] || $(PYTHON) -m venv $(VENV); \
	$(PY) -m pip install -q --upgrade pip; \
	echo "pip install -e '.$(EXTRAS_$*)'"; $(PY) -m pip install -q -e '.$(EXTRAS_$*)'; \
	find $(VENV) -maxdepth 1 -name '.installed-*' ! -name '.installed-$(PYPROJECT)-*' -delete; \
	touch $@

# The pinned CLI, project-local, by the command a user runs (`skillevo setup`; as `-m skillevo.agent.install`,
# a module its own package imports, Python warned on every setup).
$(CLAUDE_BIN): | $(call STAMP,demo)
	$(PY) -m skillevo setup --prefix $(CLAUDE_PREFIX)
	touch $@

DVC := $(VENV)/bin/dvc
GENERATIONS ?= 1
# evolve and the gate study run the simulator with realistic noise; the demo keeps its mild profile
NOISE ?= realistic

# One simulated generation: dvc repro, then the decision and where to read it.
# BACKEND=openai (or litellm, or simulator to go back) switches params.yaml's model first: the same offline
# generation through the real LiteLLM proxy, the simulator answering upstream in OpenAI's dialect.
demo: setup
ifdef BACKEND
	@$(MAKE) --no-print-directory $(if $(filter simulator,$(BACKEND)),,setup-gateway)
	$(PY) -m skillevo.ops.backend $(BACKEND)
endif
	$(DVC) repro
	@$(PY) -m skillevo.ops.generations status

repro: setup
	$(DVC) repro

# Everything that can be known wrong before any money is spent, one line per problem (skillevo/readiness.py).
check: setup
	$(VENV)/bin/skillevo check

apply: setup
	$(VENV)/bin/skillevo apply

revert: setup
	$(VENV)/bin/skillevo revert

evolve: setup
	$(PY) -m skillevo.ops.generations evolve --generations $(GENERATIONS) --dvc $(DVC) --noise $(NOISE)

report: setup
	@$(PY) -m skillevo.ops.generations report

# `dvc plots show`, readable offline: the Vega versions dvc-render loads from a CDN, installed from npm and
# inlined into the page (results/plots/index.html).
VEGA := $(TOOLS)/vega-5.20.2-lite-5.2.0-embed-6.18.2
plots: setup $(VEGA)/.installed
	@$(PY) -m skillevo.ops.plots --node-modules $(VEGA)/node_modules --dvc $(DVC)

$(VEGA)/.installed:
	mkdir -p $(VEGA)
	npm install --prefix $(VEGA) --no-fund --no-audit --loglevel=error --legacy-peer-deps vega@5.20.2 vega-lite@5.2.0 vega-embed@6.18.2
	touch $@

# Record the skill family's execute bits in skill-modes.json (the bench refuses a family that disagrees).
modes: setup
	$(PY) -m skillevo.ops.modes --write

# Outputs, the run-cache and the cell store (docs/cell-store.md), all to the default DVC remote.
push: setup
	$(DVC) push --run-cache
	$(PY) -m skillevo.ops.cells push

pull: setup
	@status=0; $(DVC) pull --run-cache || status=$$?; $(PY) -m skillevo.ops.cells pull && exit $$status

# Free DVC's cache and the cell store of what can never be served again; unlike `dvc gc -w`, no run-cache entry
# is left pointing at a deleted object (skillevo/ops/gc.py). DRY_RUN=1 only says what it would remove.
gc: setup
	$(PY) -m skillevo.ops.gc $(if $(DRY_RUN),--dry-run)

# A single sandboxed session against the simulator, for a quick check of the machine.
session-demo: setup
	$(PY) -m skillevo.simulator.demo

# ruff's linter, configured in pyproject.toml to the code's own style (no `ruff format`).
lint: setup-test
	$(PY) -m ruff check skillevo stages tests benchmarks  # stages/: the package links it; ruff follows no link
	$(PY) -m mypy  # pyproject.toml [tool.mypy]: the package, strict on skillevo.files, .core and .gate

# Two tiers (docs/testing.md): `test` is everything that needs no CLI, bubblewrap or Ray (minutes, in-process);
# `test-full` is all of it, end to end, in WORKERS processes (a test file stays on one worker: module fixtures),
# handed out in collection order (tests/conftest.py puts the generations first), not xdist's most-tests-first.
FAST = not cli and not bwrap and not ray and not gateway
WORKERS ?= 2
test: setup-test
	$(PY) -m pytest -q -m "$(FAST)" $(PYTEST_ARGS)

test-full: setup-full
	$(PY) -m pytest -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench-session: setup-test
	$(PY) -m benchmarks.session_overhead

bench-pipeline: setup-test
	$(PY) -m benchmarks.pipeline_walls

# The gate's error rates by simulation (docs/gate.md): DECISIONS per cell (default 2000); fails when a target is missed.
gate-study: setup-test
	$(PY) -m benchmarks.gate_study --check $(if $(DECISIONS),--decisions $(DECISIONS))

# How often the demo promotes its known-better candidate over simulator seeds (~5 min a seed).
SEEDS ?= 20
demo-seeds: setup-test
	$(PY) -m benchmarks.demo_seeds --seeds $(SEEDS)

# A/A on the simulator's own noise with drift on: an identical candidate beside its control in MOMENTS benches,
# decided interleaved and as the separate design would (~25 min); fails when the interleaved rate is over target.
gate-study-simulator: setup-test
	$(PY) -m benchmarks.simulator_null --moments $(or $(MOMENTS),8) --pool $(or $(POOL),20) --resamples $(or $(RESAMPLES),1000)

# Paid sessions per decision over a scripted 3-generation schedule: ours (cell store + sequential runs) against
# re-running the incumbent every generation at equal power, and the seed's way for reference (~15 min a seed).
bench-economy: setup-test
	$(PY) -m benchmarks.economy --seeds $(or $(ECONOMY_SEEDS),3)

bench-cells: setup-test
	$(PY) -m benchmarks.bench_cells $(if $(EXECUTOR),--executor $(EXECUTOR)) $(if $(LATENCY),--latency $(LATENCY))

clean:
	rm -rf $(VENV) .tools .pytest_cache results

# --- Container image (docs/container.md) -----------------------------------------------------------------
# docker when its engine answers, else podman; CONTAINER_ENGINE=docker|podman chooses. BASE_IMAGE (empty:
# the Dockerfile's pinned default) is any Debian 12 image; CA_BUNDLE is a PEM file for networks that
# intercept TLS, passed as a build secret (never stored in a layer).
IMAGE ?= skillevo
IMAGE_UID ?= 10001
BASE_IMAGE ?=
CA_BUNDLE ?=
CONTAINER_ENGINE ?=
IMAGE_WORKTREE ?= $(CURDIR)
IMAGE_RUN_ARGS ?=
container_engine = $(or $(CONTAINER_ENGINE),$(shell if docker info >/dev/null 2>&1; then echo docker; \
  elif command -v podman >/dev/null 2>&1; then echo podman; fi))

.PHONY: image image-demo image-run
image:
	@set -e; engine="$(container_engine)"; \
	if [ -z "$$engine" ]; then echo "make image needs docker (with a running engine) or podman"; exit 1; fi; \
	args=(build --build-arg "CLAUDE_CODE_VERSION=$(CLAUDE_CODE_VERSION)" --build-arg "AGENT_UID=$(IMAGE_UID)" -t "$(IMAGE)"); \
	if [ "$$engine" = podman ]; then args+=(--format docker); else export DOCKER_BUILDKIT=1; fi; \
	if [ -n "$(BASE_IMAGE)" ]; then args+=(--build-arg "BASE_IMAGE=$(BASE_IMAGE)"); fi; \
	if [ -n "$(CA_BUNDLE)" ]; then args+=(--secret "id=ca_bundle,src=$(abspath $(CA_BUNDLE))"); fi; \
	echo "$$engine $${args[*]} ."; "$$engine" "$${args[@]}" .; \
	size=$$("$$engine" image inspect --format '{{.Size}}' "$(IMAGE)"); \
	echo "image $(IMAGE): $$size bytes ($$(numfmt --to=iec-i --suffix=B "$$size")), Claude Code $(CLAUDE_CODE_VERSION), built with $$engine"

# A command inside the image on a repository: REPO mounted at MOUNT_AT (default: its own path, so the paths a
# pipeline records hold on the host too), run in RUN_IN (default: MOUNT_AT), TARGETS (task targets outside the
# repository, listed in params tasks.target_roots) mounted read-only at their own paths. It runs as the
# repository's owner so what it writes belongs to them: rootless podman maps the caller to the image's user
# (keep-id); docker and rootful podman run as the repository's uid:gid. bubblewrap needs an unconfined seccomp
# profile (user namespaces, pivot_root), no AppArmor confinement, and a procfs it can mount (unmasked /proc).
# IMAGE_NETWORK=none (default) suits the offline simulator on the container's loopback; a real model needs one.
#   make image-run REPO=~/src/app RUN_IN=~/src/app/evolve RUN="dvc repro"
REPO ?= $(IMAGE_WORKTREE)
MOUNT_AT ?= $(abspath $(REPO))
RUN_IN ?= $(MOUNT_AT)
RUN ?= make demo
TARGETS ?=
IMAGE_NETWORK ?= none
image-run:
	@set -e; engine="$(container_engine)"; \
	if [ -z "$$engine" ]; then echo "make image-run needs docker (with a running engine) or podman"; exit 1; fi; \
	[ -d "$(REPO)" ] || { echo "make image-run: REPO=$(REPO) is not a directory"; exit 2; }; \
	args=(run --rm --init --network "$(IMAGE_NETWORK)" --security-opt seccomp=unconfined \
	      --security-opt apparmor=unconfined -v "$(abspath $(REPO)):$(MOUNT_AT)" -w "$(abspath $(RUN_IN))"); \
	for target in $(TARGETS); do real=$$(realpath "$$target"); args+=(-v "$$real:$$real:ro"); done; \
	if [ "$$engine" = podman ]; then args+=(--security-opt 'unmask=/proc/*'); \
	else args+=(--security-opt systempaths=unconfined); fi; \
	owner=$$(stat -c %u:%g "$(REPO)"); \
	if [ "$$engine" = podman ] && [ "$$(id -u)" != 0 ]; then args+=(--userns "keep-id:uid=$(IMAGE_UID),gid=$(IMAGE_UID)"); \
	else args+=(--user "$$owner"); [ "$${owner%%:*}" = "$(IMAGE_UID)" ] || args+=(-e HOME=/tmp); \
	  [ "$${owner%%:*}" != 0 ] || echo "note: $(REPO) is owned by root, so the container runs as root (see docs/container.md)"; fi; \
	echo "$$engine $${args[*]} $(IMAGE_RUN_ARGS) --entrypoint /usr/bin/env $(IMAGE) $(RUN)"; \
	"$$engine" "$${args[@]}" $(IMAGE_RUN_ARGS) --entrypoint /usr/bin/env "$(IMAGE)" $(RUN)

# `make demo` inside the image, on this checkout mounted at /work (where the image's editable install is).
image-demo:
	@$(MAKE) --no-print-directory image-run REPO="$(IMAGE_WORKTREE)" MOUNT_AT=/work RUN_IN=/work RUN="make demo"
