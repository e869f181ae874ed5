"""Find the pinned Claude Code CLI and build its headless argv.

Credentials never go into argv: the CLI gets a placeholder key through its environment and the
model relay adds the real one outside the sandbox.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

from skillevo.agent import install
from skillevo.core.arms import McpServer
from skillevo.core.pins import CLAUDE_CODE_VERSION
from skillevo.files.errors import BrokenEnvironment
from skillevo.sandbox import bwrap

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # a checkout (make setup), or site-packages (never has .tools)
LOCAL_CLI = PROJECT_ROOT / f".tools/claude-code-{CLAUDE_CODE_VERSION}" / install.BIN
CLI_DST = "/opt/claude/claude"


class CLIMissing(BrokenEnvironment):
    """The pinned CLI is not installed (or another version is); the message says to run `make setup`."""


@functools.cache
def _version(path: str) -> str:
    return install.installed_version(Path(path))


def locate() -> Path:
    """The real binary of the pinned CLI (symlinks resolved, so it can be bind-mounted alone): $SKILLEVO_CLAUDE, the
    checkout's .tools/ (make setup), the user's install (skillevo setup), or PATH, whichever is the pinned version."""
    candidates = [os.environ.get("SKILLEVO_CLAUDE"), str(LOCAL_CLI), str(install.default_prefix() / install.BIN),
                  shutil.which("claude")]
    tried = []
    for c in candidates:
        if not c or not Path(c).exists():
            continue
        real = str(Path(c).resolve())
        version = _version(real)
        if version == CLAUDE_CODE_VERSION:
            return Path(real)
        tried.append(f"{c} is version {version or 'unknown'}")
    detail = "; ".join(tried) or "not found in $SKILLEVO_CLAUDE, .tools/, the user's install or PATH"
    raise CLIMissing(f"the pinned Claude Code CLI {CLAUDE_CODE_VERSION} is not installed ({detail}): run `skillevo "
                     "setup` (or `make setup` in a skillevo checkout)")


def settings(tools: tuple[str, ...]) -> dict:
    """Explicit settings: Bash runs in Claude's own inner sandbox with no network at all."""
    return {
        "sandbox": {
            "enabled": True,
            "failIfUnavailable": True,
            "autoAllowBashIfSandboxed": True,
            "allowUnsandboxedCommands": False,
            "enableWeakerNestedSandbox": True,  # our bwrap already gave it a PID namespace and /proc
            "network": {"allowedDomains": []},
        },
        "permissions": {"allow": list(tools), "disableBypassPermissionsMode": "disable"},
    }


def mcp_config(servers: tuple[McpServer, ...], tmp_mb: int = bwrap.SHM_MB) -> str:
    """--mcp-config's JSON: the arm's stdio servers only (--strict-mcp-config ignores every other source, so a
    workspace's .mcp.json or a user config never adds one), each started in a sandbox of its own (bwrap.nested):
    a server gets no model access, so none of its calls can go unbilled."""
    config = {}
    for s in servers:
        command, *args = bwrap.nested(s.argv(), tmp_mb)
        config[s.name] = {"type": "stdio", "command": command, "args": args, "env": {}}
    return json.dumps({"mcpServers": config}, separators=(",", ":"))


def argv(*, model: str, tools: tuple[str, ...], max_turns: int | None = None, effort: str | None = None,
         mcp: tuple[McpServer, ...] = (), max_budget_usd: float | None = None, tmp_mb: int = bwrap.SHM_MB
         ) -> list[str]:
    allowed = (*tools, *(s.tools for s in mcp))  # `mcp__<server>` allows every tool of that server
    args = [
        CLI_DST, "-p",
        "--input-format", "text",
        "--output-format", "stream-json", "--verbose",
        "--model", model,
        "--settings", json.dumps(settings(allowed), separators=(",", ":")),
        "--setting-sources", "project",
        "--strict-mcp-config", "--mcp-config", mcp_config(mcp, tmp_mb),
        "--tools", ",".join(tools),
        "--allowedTools", ",".join(allowed),
        "--permission-mode", "dontAsk",
        "--no-session-persistence",
    ]
    if max_turns:
        args += ["--max-turns", str(max_turns)]
    if effort:
        args += ["--effort", effort]
    if max_budget_usd is not None:  # the CLI stops the session once its own cost estimate reaches it
        args += ["--max-budget-usd", f"{max_budget_usd:.6f}"]
    return args
