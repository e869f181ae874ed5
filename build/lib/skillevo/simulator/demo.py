"""A one-session demo: a tiny git workspace with a `work` skill, and the playbook that plays it.

Used by `make demo` (until the pipeline exists), `make bench-session` and the foundation tests, so
all three exercise exactly the same session.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from skillevo.core import config
from skillevo.simulator import playbook

SKILL = """---
name: work
description: Carry out a coding task in this repository.
---
# Work
Implement the requested change with the smallest edit that works.
Verify the change by running the check before you finish.
"""

PLAYBOOK = {
    "schema_version": 1,
    "instructions": [
        {"id": "survey", "phrase": "read every module of the package before editing"},
        {"id": "check", "phrase": "verify the change by running the check", "necessary": True},
    ],
    "tasks": [{
        "id": "greet",
        "match": "friendlier greeting",
        "sessions": {"work": [
            {"read": "pkg/greet.py"},
            {"when": "survey", "bash": "cat pkg/*.py"},
            {"edit": {"path": "pkg/greet.py", "old": '"hi"', "new": '"hello"'}},
            {"when": "check", "bash": "grep -c hello pkg/greet.py"},
        ]},
    }],
}

PROMPT = "Use the work skill for: make the friendlier greeting say hello"
MODEL = config.section(config.ModelParams, "model", {}, "schema defaults").name  # params default


def book() -> playbook.Playbook:
    return playbook.parse(PLAYBOOK, f"{__name__}.PLAYBOOK")


def git(cwd: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "skillevo", "GIT_AUTHOR_EMAIL": "skillevo@invalid",
           "GIT_COMMITTER_NAME": "skillevo", "GIT_COMMITTER_EMAIL": "skillevo@invalid"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def make_workspace(root: Path, skill_text: str = SKILL) -> Path:
    ws = root / "ws"
    (ws / ".claude/skills/work").mkdir(parents=True)
    (ws / "pkg").mkdir()
    (ws / ".claude/skills/work/SKILL.md").write_text(skill_text)
    (ws / "pkg/greet.py").write_text('def greet():\n    return "hi"\n')
    (ws / "pkg/other.py").write_text("VALUE = 1\n" * 50)
    git(ws, "init", "-q")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "start")
    return ws


def main() -> int:
    """Run the demo session once and print its record: what `make demo` does until the pipeline exists."""
    import json
    import tempfile

    from skillevo import sandbox
    from skillevo.agent import SessionSpec, run_session
    from skillevo.simulator import Simulator

    sandbox.preflight()
    with tempfile.TemporaryDirectory(prefix="skillevo-demo-") as tmp, Simulator(book()) as sim:
        ws = make_workspace(Path(tmp))
        print("SIMULATED: one Claude Code session (the real pinned CLI, sandboxed with bwrap) against the")
        print("offline simulator; no model and no network are used. The full pipeline demo comes later.")
        record = run_session(SessionSpec(prompt=PROMPT, workspace=ws, model=MODEL, endpoint=sim.url(),
                                         transcript_dir=Path(tmp) / "transcripts", transcript_name="demo",
                                         expected_skill="work", timeout_s=120))
        print(json.dumps({k: record[k] for k in ("ok", "error_kind", "skill_invoked", "num_turns", "cost_usd",
                                                  "input_tokens", "output_tokens", "tool_uses", "wall_s")}, indent=1))
        print("workspace diff:\n" + git(ws, "diff", "--stat"))
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
