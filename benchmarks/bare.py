"""The bare baseline the benchmarks compare against: the same CLI and commands with no containment."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from skillevo.agent import cli
from skillevo.agent.session import DEFAULT_TOOLS


def session(binary: Path, endpoint: str, model: str, prompt: str, ws: Path, home: Path) -> float:
    """Wall seconds of one CLI session run directly on the host, pointed straight at `endpoint`."""
    home.mkdir(parents=True, exist_ok=True)
    argv = [str(binary)] + cli.argv(model=model, tools=DEFAULT_TOOLS)[1:]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "ANTHROPIC_BASE_URL": endpoint, "ANTHROPIC_API_KEY": "bench",
           "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "TMPDIR": str(home),
           "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.monotonic()
    out = subprocess.run(argv, input=prompt.encode(), cwd=ws, env=env, capture_output=True, timeout=600)
    wall = time.monotonic() - start
    if out.returncode != 0 or b'"subtype":"success"' not in out.stdout:
        raise RuntimeError(f"bare session failed: {out.stderr[-500:]!r}")
    return wall


def command(script: str, ws: Path, env: dict[str, str] | None = None) -> float:
    """Wall seconds of a shell command run directly in `ws` (its exit status is not the point here)."""
    start = time.monotonic()
    subprocess.run(["/bin/sh", "-c", script], cwd=ws, capture_output=True, timeout=600,
                   env={"PATH": "/usr/bin:/bin", "HOME": str(ws), "PYTHONDONTWRITEBYTECODE": "1", **(env or {})})
    return time.monotonic() - start
