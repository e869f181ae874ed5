"""One proposer session in its own sandbox, and the validated export of what it wrote (its prompt: prompt.py;
reading back what it wrote: proposal.py).

The sandbox holds a copy of the incumbent skills, the evidence bundle read-only at /evidence and an
empty output directory — never the tasks, oracles, targets, pipeline code or other results. Nothing
leaves it until it passes the overlay rules.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from skillevo import backends
from skillevo.agent import SessionSpec, run_session
from skillevo.core import layout, overlay
from skillevo.core.models import Credential, Model
from skillevo.core.oracle_guard import OracleGuard
from skillevo.files import documents, safefs
from skillevo.propose.prompt import MAX_PROMPT_BYTES, PROMPT, render_prompt
from skillevo.propose.proposal import (
    MAX_PROPOSAL_BYTES,
    ProposalRefused,
    declined,
    frontmatter_note,
    predicted,
    read_declined,
)
from skillevo.sandbox import Mount

EVIDENCE_DST = "/evidence"
TOOLS = ("Read", "Write", "Edit", "Bash", "Glob", "Grep")


def run(*, prompt: str, skills_dir: Path, evidence_dir: Path, evolvable: list[str], model: Model,
        credential: Credential | None, limits: overlay.Limits, out: Path, timeout_s: float,
        route: str | None = None) -> dict[str, Any]:
    """Run the session; export overlay/, proposal.md and session.json to `out` (which must be empty). `route`
    names the simulator's role (/mode/proposer) on a simulated backend."""
    if out.exists() and (out.is_symlink() or not out.is_dir() or any(out.iterdir())):
        raise ProposalRefused(f"{out}: not an empty directory (rule: a proposal is written once)")
    executables: set[str] = set()
    family = layout.read_family(skills_dir, limits.frontmatter_keys, executables)
    with tempfile.TemporaryDirectory(prefix="skillevo-propose-") as tmp:
        ws = Path(tmp) / "ws"
        safefs.write_tree(ws / "skills", family, executables=executables)
        (ws / "out").mkdir(parents=True)
        endpoint = backends.session_endpoint(model, route)
        record = run_session(SessionSpec(
            prompt=prompt, workspace=ws, model=model.name, endpoint=endpoint.url, headers=endpoint.headers,
            prices=model.prices, credential=credential,
            transcript_dir=out / "transcripts", transcript_name="proposer", expected_skill=None,
            readonly_paths=(), mounts=(Mount(evidence_dir.absolute(), EVIDENCE_DST),), tools=TOOLS,
            timeout_s=timeout_s, effort=model.effort))
        safefs.write_atomic(out / "session.json", documents.dump_json(record))
        if not record["ok"]:
            raise ProposalRefused(f"the proposer session failed ({record['error_kind']}): {record['error_detail']}")
        if not (ws / "out/overlay").exists():
            reason = read_declined(ws / "out")
            safefs.write_atomic(out / "proposal.md", reason.encode())
            return {**record, "changed_lines": 0, "overlay_files": [], "frontmatter_changes": [], "declined": True}
        overlay_executables: set[str] = set()
        files = overlay.read_overlay(ws / "out/overlay", limits, overlay_executables)
        checked = overlay.validate(files, family, set(evolvable), OracleGuard(()), limits, str(skills_dir),
                                   executables, overlay_executables)
        text = safefs.read_text(ws / "out/proposal.md", max_bytes=MAX_PROPOSAL_BYTES, what="out/proposal.md")
    safefs.write_tree(out / "overlay", files, executables=overlay_executables)
    safefs.write_atomic(out / "proposal.md", (text.rstrip("\n") + "\n\n" + frontmatter_note(checked)).encode())
    return {**record, "changed_lines": checked.changed_lines, "overlay_files": sorted(files),
            "frontmatter_changes": checked.frontmatter_changes}


__all__ = ["EVIDENCE_DST", "MAX_PROMPT_BYTES", "MAX_PROPOSAL_BYTES", "PROMPT", "TOOLS", "ProposalRefused", "declined",
           "frontmatter_note", "predicted", "read_declined", "render_prompt", "run"]
