"""One proposer session in its own sandbox, and the validated export of what it wrote.

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
from skillevo.core import frontmatter, layout, overlay, prediction
from skillevo.core.models import Credential, Model
from skillevo.core.oracle_guard import OracleGuard
from skillevo.files import documents, safefs
from skillevo.files.errors import BadInput
from skillevo.sandbox import Mount

PROMPT = Path(__file__).resolve().parent / "prompts/propose.md"  # the default template, shipped with the package
EVIDENCE_DST = "/evidence"
MAX_PROPOSAL_BYTES = 256 << 10
MAX_PROMPT_BYTES = 64 << 10
TOOLS = ("Read", "Write", "Edit", "Bash", "Glob", "Grep")


class ProposalRefused(BadInput):
    """The proposer's session failed, or what it wrote breaks a rule."""


SCOPE = {
    overlay.SUPPORTING_FILES: ("replace other files of an evolvable skill (references, data) that are not scripts, "
                               "and add new files inside it"),
    overlay.SCRIPTS: "edit a script (a file with an execute bit) or change an execute bit",
}


def render_prompt(template_path: Path, evolvable: list[str], max_changed_lines: int,
                  allow: tuple[str, ...] | frozenset[str] = ()) -> str:
    """The proposer's prompt, stating exactly what params propose.allow lets this overlay do."""
    template = safefs.read_text(template_path, max_bytes=MAX_PROMPT_BYTES, what="proposer prompt template")
    allowed = "; ".join(["replace Markdown files of an evolvable skill"]
                        + [SCOPE[a] for a in sorted(SCOPE) if a in allow])
    if overlay.SUPPORTING_FILES not in allow:
        allowed += ". Adding a new file is not possible (params propose.allow does not list supporting-files)."
    else:
        allowed += "." if overlay.SCRIPTS in allow else ". A new file may not carry an execute bit."
    keys = ", ".join(sorted(frontmatter.PRIVILEGED))
    privileged = (f"You may change the frontmatter keys {keys} (params allow it)." if overlay.PRIVILEGED_FRONTMATTER
                  in allow else f"Do not add, change or remove the frontmatter keys {keys}.")
    return (template.replace("{evolvable}", ", ".join(evolvable)).replace("{max_changed_lines}", str(max_changed_lines))
            .replace("{allowed}", allowed).replace("{privileged}", privileged))


def frontmatter_note(checked: overlay.Checked) -> str:
    """Appended to proposal.md by skillevo, not the proposer: a header or script change must be seen, not
    trusted to prose."""
    lines = ["## Frontmatter changes (computed by skillevo)", ""]
    lines += [f"- {change}" for change in checked.frontmatter_changes] or ["None: every SKILL.md header is unchanged."]
    lines += ["", "## Script changes (computed by skillevo)", ""]
    lines += [f"- {change}" for change in checked.script_changes] or ["None: no script is added, edited or re-marked."]
    return "\n".join(lines) + "\n"


def _declined(ws_out: Path) -> str:
    """The proposer's reasoned refusal to change anything: proposal.md headed NO_PROPOSAL, and nothing else in out/.
    Anything else without an overlay is a failed session, refused as before."""
    others = sorted(p.name for p in ws_out.iterdir() if p.name != "proposal.md")
    text = safefs.read_text(ws_out / "proposal.md", max_bytes=MAX_PROPOSAL_BYTES, what="out/proposal.md") if (
        ws_out / "proposal.md").is_file() and not (ws_out / "proposal.md").is_symlink() else ""
    if others or not text.startswith(overlay.NO_PROPOSAL):
        raise ProposalRefused(f"the proposer wrote no overlay under out/overlay/ and no proposal.md headed "
                              f"{overlay.NO_PROPOSAL!r} (rule: one overlay, or a reasoned no proposal)")
    return text.rstrip("\n") + "\n"


def declined(proposal_dir: Path) -> str | None:
    """Why the proposer declined, when its exported proposal is a no_proposal (proposal.md headed NO_PROPOSAL, no
    overlay); None when it proposed. The one reading of that rule: freeze and the reports call it."""
    text = proposal_dir / "proposal.md"
    if (proposal_dir / "overlay").exists() or not text.is_file() or text.is_symlink():
        return None
    body = safefs.read_text(text, max_bytes=MAX_PROPOSAL_BYTES, what=str(text))
    if not body.startswith(overlay.NO_PROPOSAL):
        return None
    paragraphs = [" ".join(part.split()) for part in body.removeprefix(overlay.NO_PROPOSAL).split("\n\n")]
    return next((part for part in paragraphs if part), "no reason given")[:1000]  # its first paragraph


def predicted(proposal_dir: Path) -> float | None:
    """The improvement the exported proposal.md predicts (skillevo.core.prediction), None without one; a malformed
    prediction is refused, naming the file."""
    text = proposal_dir / "proposal.md"
    return prediction.parse(safefs.read_text(text, max_bytes=MAX_PROPOSAL_BYTES, what=str(text)), str(text))


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
            reason = _declined(ws / "out")
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
