"""One proposer session in its own sandbox, and the validated export of what it wrote.

The sandbox holds a copy of the incumbent skills, the evidence bundle read-only at /evidence and an
empty output directory — never the tasks, oracles, targets, pipeline code or other results. Nothing
leaves it until it passes the overlay rules.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from skillevo import overlay
from skillevo.agent import SessionSpec, run_session
from skillevo.sandbox import Mount

EVIDENCE_DST = "/evidence"
MAX_PROPOSAL_BYTES = 256 << 10
TOOLS = ("Read", "Write", "Edit", "Bash", "Glob", "Grep")


class ProposalRefused(ValueError):
    pass


def render_prompt(template: str, evolvable: list[str], max_changed_lines: int) -> str:
    return template.replace("{evolvable}", ", ".join(evolvable)).replace("{max_changed_lines}", str(max_changed_lines))


def run(*, prompt: str, skills_dir: Path, evidence_dir: Path, evolvable: list[str], model: str, endpoint: str,
        api_key: str | None, limits: overlay.Limits, out: Path, timeout_s: float, effort: str | None = None) -> dict:
    """Run the session; export overlay/, proposal.md and session.json to `out` (which must be empty)."""
    if out.exists() and any(out.iterdir()):
        raise ProposalRefused(f"{out} is not empty")
    with tempfile.TemporaryDirectory(prefix="skillevo-propose-") as tmp:
        ws = Path(tmp) / "ws"
        for skill in sorted(p.name for p in skills_dir.iterdir() if (p / "SKILL.md").is_file()):
            shutil.copytree(skills_dir / skill, ws / "skills" / skill)
        (ws / "out").mkdir(parents=True)
        record = run_session(SessionSpec(
            prompt=prompt, workspace=ws, model=model, endpoint=endpoint, api_key=api_key,
            transcript_dir=out / "transcripts", transcript_name="proposer", expected_skill=None,
            readonly_paths=(), mounts=(Mount(evidence_dir.absolute(), EVIDENCE_DST),), tools=TOOLS,
            timeout_s=timeout_s, effort=effort))
        (out / "session.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        if not record["ok"]:
            raise ProposalRefused(f"the proposer session failed ({record['error_kind']}): {record['error_detail']}")
        files = overlay.read_overlay(ws / "out/overlay", limits) if (ws / "out/overlay").exists() else {}
        if not files:
            raise ProposalRefused("the proposer wrote no overlay under out/overlay/")
        changed = overlay.validate(files, skills_dir, set(evolvable), [], limits)
        proposal = ws / "out/proposal.md"
        if proposal.is_symlink() or not proposal.is_file() or proposal.stat().st_size > MAX_PROPOSAL_BYTES:
            raise ProposalRefused(f"out/proposal.md must be a regular file of at most {MAX_PROPOSAL_BYTES} bytes")
        text = proposal.read_bytes().decode("utf-8")  # refuses non-UTF-8 with UnicodeDecodeError (a ValueError)
        for rel, data in files.items():
            (out / "overlay" / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / "overlay" / rel).write_bytes(data)
        (out / "proposal.md").write_text(text)
    return {**record, "changed_lines": changed, "overlay_files": sorted(files)}
