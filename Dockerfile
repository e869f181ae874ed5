# skillevo in a container: the pipeline, its pinned Python deps, the pinned Claude Code CLI, bubblewrap.
#
#   make image        (or: docker build --build-arg CLAUDE_CODE_VERSION=<pins.py> -t skillevo .)
#   make image-demo   (runs `make demo` inside, with the flags bubblewrap needs; see docs/container.md)
#
# BASE_IMAGE is any Debian 12 (bookworm) root filesystem: the official slim image by default, pinned by
# its dated tag; CI passes one it built offline with mmdebstrap. Networks that intercept TLS can pass their
# CA bundle as a build secret (`--secret id=ca_bundle,src=<file>`): it is used by pip and npm during the
# build only and never written to a layer.
ARG BASE_IMAGE=debian:bookworm-20251229-slim

# --- builder: npm installs the pinned CLI; its postinstall puts the native binary in place -------------
FROM ${BASE_IMAGE} AS claude
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive
# Debian 12's Node 18 only draws an EBADENGINE warning from the package (engines: node >= 22); the
# binary it installs does not use Node at all. Apt versions follow the base image's point release.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# The default must equal CLAUDE_CODE_VERSION in skillevo/core/pins.py (the final stage checks); `make image`
# passes the value from pins.py.
ARG CLAUDE_CODE_VERSION=2.1.332
RUN --mount=type=secret,id=ca_bundle \
    if [ -s /run/secrets/ca_bundle ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/ca_bundle; fi \
 && npm install --prefix /opt/claude-code --no-fund --no-audit --no-update-notifier --loglevel=error \
      "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}" \
 && install -m 0755 "$(readlink -f /opt/claude-code/node_modules/.bin/claude)" /claude \
 && /claude --version | grep -q "^${CLAUDE_CODE_VERSION} "

# --- the image ----------------------------------------------------------------------------------------
FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive
# bubblewrap + socat: the session sandbox and its model relay; python3 + python3-pytest: what the demo
# tasks run inside the sandbox (the system Python, not the venv); python3-venv: the project's venv.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      bubblewrap socat git ripgrep ca-certificates make python3 python3-venv python3-pytest \
 && rm -rf /var/lib/apt/lists/*

# A numeric non-root user; /work is where the user's repository is mounted (the image holds a copy of
# this checkout there, so the image also runs on its own). Git may read /work whoever owns the mount.
ARG AGENT_UID=10001
RUN useradd --uid "${AGENT_UID}" --user-group --create-home --shell /bin/bash agent \
 && install -d -o "${AGENT_UID}" -g "${AGENT_UID}" /work \
 && git config --system --add safe.directory /work

# The CLI binary alone (no Node in this image). The Makefile looks for it under TOOLS, so it finds the
# pinned version there and never tries to install it.
ARG CLAUDE_CODE_VERSION=2.1.332
COPY --from=claude /claude /usr/local/bin/claude
RUN install -d "/opt/skillevo/tools/claude-code-${CLAUDE_CODE_VERSION}/node_modules/.bin" \
 && ln -s /usr/local/bin/claude "/opt/skillevo/tools/claude-code-${CLAUDE_CODE_VERSION}/node_modules/.bin/claude"

ENV VENV=/opt/skillevo/venv \
    TOOLS=/opt/skillevo/tools \
    SKILLEVO_CLAUDE=/usr/local/bin/claude \
    DISABLE_AUTOUPDATER=1 \
    DVC_NO_ANALYTICS=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1
ENV PATH=/opt/skillevo/venv/bin:${PATH}

# What `make setup-full` installs (`.[dev,ray,gateway]`; the image is also the Ray worker image, and runs the
# openai/litellm backends' LiteLLM proxy): the pinned deps
# first, in a layer that changes only with pyproject.toml, then the project as an editable install of
# /work (so a repository mounted there is the code that runs). The venv gets the Makefile's own content
# stamp, asked of the Makefile, and `make setup` must then find nothing to do: `make` in the container
# reuses this environment as it is.
COPY pyproject.toml /tmp/skillevo-deps/pyproject.toml
RUN --mount=type=secret,id=ca_bundle \
    if [ -s /run/secrets/ca_bundle ]; then \
      cat /etc/ssl/certs/ca-certificates.crt /run/secrets/ca_bundle > /tmp/skillevo-deps/ca.pem; \
      export PIP_CERT=/tmp/skillevo-deps/ca.pem; \
    fi \
 && python3 -m venv "${VENV}" \
 && python3 -c 'import tomllib, sys; p = tomllib.load(open(sys.argv[1], "rb"))["project"]; o = p["optional-dependencies"]; print("\n".join(p["dependencies"] + o["dev"] + o["ray"] + o["gateway"]))' \
      /tmp/skillevo-deps/pyproject.toml > /tmp/skillevo-deps/requirements.txt \
 && "${VENV}/bin/pip" install --no-cache-dir -q -r /tmp/skillevo-deps/requirements.txt \
 && rm -rf /tmp/skillevo-deps

WORKDIR /work
COPY --chown=${AGENT_UID}:${AGENT_UID} . /work
# SC2016: `$(INSTALLED)` is for make to expand (the Makefile's stamp path), not the shell.
# hadolint ignore=SC2016
RUN --mount=type=secret,id=ca_bundle \
    grep -qx "CLAUDE_CODE_VERSION = \"${CLAUDE_CODE_VERSION}\"" skillevo/core/pins.py \
      || { echo "build ARG CLAUDE_CODE_VERSION=${CLAUDE_CODE_VERSION} is not the version pinned in skillevo/core/pins.py" >&2; exit 1; } \
 && if [ -s /run/secrets/ca_bundle ]; then \
      cat /etc/ssl/certs/ca-certificates.crt /run/secrets/ca_bundle > /tmp/ca.pem; export PIP_CERT=/tmp/ca.pem; \
    fi \
 && "${VENV}/bin/pip" install --no-cache-dir -q -e '.[dev,ray,gateway]' \
 && rm -rf /tmp/ca.pem /work/build \
 && touch "$(make -s --no-print-directory --eval '_image-stamp: ; @echo $(INSTALLED)' _image-stamp)" \
 && make -s setup \
 && chown -R "${AGENT_UID}:${AGENT_UID}" /work \
 && claude --version | grep -q "^${CLAUDE_CODE_VERSION} "

# The copy in the image becomes a one-commit repository (the build context carries no history): DVC and
# the pipeline's rules (apply replaces committed files only) need one. A mounted repository brings its own.
USER ${AGENT_UID}:${AGENT_UID}
RUN git init -q -b main \
 && git add -A \
 && git -c user.name=skillevo -c user.email=image@skillevo.invalid commit -q -m "skillevo image snapshot"

ENTRYPOINT ["make"]
CMD ["demo"]
