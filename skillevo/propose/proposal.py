"""What the proposer wrote, read back: its proposal.md with skillevo's own notes, a reasoned refusal (no_proposal),
and its prediction (skillevo.core.prediction). Each rule read in one place, by the stages and the reports alike."""

from __future__ import annotations

from pathlib import Path

from skillevo.core import overlay, prediction
from skillevo.files import safefs
from skillevo.files.errors import BadInput

MAX_PROPOSAL_BYTES = 256 << 10


class ProposalRefused(BadInput):
    """The proposer's session failed, or what it wrote breaks a rule."""


def frontmatter_note(checked: overlay.Checked) -> str:
    """Appended to proposal.md by skillevo, not the proposer: a header or script change must be seen, not
    trusted to prose."""
    lines = ["## Frontmatter changes (computed by skillevo)", ""]
    lines += [f"- {change}" for change in checked.frontmatter_changes] or ["None: every SKILL.md header is unchanged."]
    lines += ["", "## Script changes (computed by skillevo)", ""]
    lines += [f"- {change}" for change in checked.script_changes] or ["None: no script is added, edited or re-marked."]
    return "\n".join(lines) + "\n"


def read_declined(ws_out: Path) -> str:
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
