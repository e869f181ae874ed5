"""The proposer's prompt: the shipped template, filled in with what params let this overlay do."""

from __future__ import annotations

from pathlib import Path

from skillevo.core import frontmatter, overlay
from skillevo.files import safefs

PROMPT = Path(__file__).resolve().parents[1] / "prompts/propose.md"  # the default template, shipped with the package
MAX_PROMPT_BYTES = 64 << 10


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
