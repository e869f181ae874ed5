"""Where things are: the skill family on disk, the files an apply rewrites, arm names, and stage outputs.

Every stage and library module asks this module instead of spelling a path or a naming rule itself, so
freeze and apply can never disagree about a destination, nor the bench and the gate about an arm's name.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from skillevo.core import frontmatter
from skillevo.files import safefs
from skillevo.files.digests import framed_digest
from skillevo.files.errors import BadInput

SKILL_FILE = "SKILL.md"
MAX_SKILL_FILE_BYTES = 256 << 10
MAX_FAMILY_BYTES = 8 << 20
CANDIDATE_PREFIX = "candidate_"

# Stage outputs (the paths dvc.yaml names; every stage takes them as options too).
RESULTS = Path("results")
BENCH = {"incumbent": RESULTS / "bench-incumbent", "candidate": RESULTS / "bench-candidate"}
EVIDENCE = RESULTS / "evidence"
PROPOSAL = RESULTS / "proposal"
FREEZE = RESULTS / "freeze"
FROZEN_OVERLAY = FREEZE / "overlay"
FREEZE_MANIFEST = FREEZE / "manifest.json"
PREFLIGHT = RESULTS / "preflight.json"
IDENTITY = RESULTS / "identity"  # each stage's code identity (skillevo/stages/identity.py), uncached
GATE = RESULTS / "gate"
PROMOTION = GATE / "promotion.json"
APPLY_RECEIPT = RESULTS / "apply" / "receipt.json"
PREVIOUS = Path("previous")  # what dvc.yaml declares: git keeps it (its README, memory.dvc)
MEMORY = PREVIOUS / "memory"  # what generations hand on, tracked by the committed previous/memory.dvc
TASKS_FILE = Path("tasks/tasks.yaml")
PLAYBOOKS = Path("tasks/playbooks")
PARAMS = Path("params.yaml")
LEARNINGS = Path("learnings.jsonl")
CELL_STORE = Path(".skillevo/cells")  # finished cells by key (skillevo.bench.cellstore); git- and DVC-ignored
MODES = Path("skill-modes.json")  # the family's execute bits, which DVC cannot see (skillevo.core.modes)


def repo_dir(text: str) -> str:
    """The one normal form of a repo-relative directory: no leading './', no trailing '/'.

    `./.claude/skills/` and `.claude/skills` are the same mirror; params, freeze and apply all see the latter.
    """
    text = text.strip()
    while text.startswith("./"):
        text = text[2:]
    return text.rstrip("/") or text


def candidate_arm(incumbent: str) -> str:
    """The candidate arm paired with incumbent arm A is candidate_A (docs/formats.md, Arms)."""
    return CANDIDATE_PREFIX + incumbent


def incumbent_arm_of(candidate: str) -> str:
    if not candidate.startswith(CANDIDATE_PREFIX) or candidate == CANDIDATE_PREFIX:
        raise BadInput(f"candidate arm {candidate!r} is not named {CANDIDATE_PREFIX}<incumbent arm> (rule: arm naming)")
    return candidate.removeprefix(CANDIDATE_PREFIX)


def skill_of(rel: str) -> str:
    """The skill a family-relative path (`<skill>/<path>`) belongs to."""
    return rel.split("/", 1)[0]


def read_family(skills_dir: str | Path, frontmatter_keys: frozenset[str] = frozenset(),
                executables: set[str] | None = None) -> dict[str, bytes]:
    """Every file of the skill family (`<skill>/<path>` -> bytes), without following links, within bounds.

    A skill is a directory holding SKILL.md with a valid frontmatter (skillevo.core.frontmatter; `frontmatter_keys`
    are params skills.frontmatter_keys); Markdown must be UTF-8 text without NUL bytes (it reaches the model
    as text), and a stray file at the top level is refused. With `executables`, every file with an execute bit
    is added to it (a skill's scripts must stay runnable wherever the family is copied).
    """
    skills_dir = Path(skills_dir)
    files = safefs.read_tree(skills_dir, max_file_bytes=MAX_SKILL_FILE_BYTES, max_total_bytes=MAX_FAMILY_BYTES,
                             max_files=4096, what="skill file", executables=executables)
    for rel, data in files.items():
        if "/" not in rel:
            raise BadInput(f"{skills_dir}/{rel}: files belong in a skill directory (<skill>/{SKILL_FILE}) "
                           "(rule: family layout)")
        if rel.lower().endswith(".md"):
            safefs.decode(data, f"{skills_dir}/{rel}", "skill file", allow_nul=False)
    names = skill_names_in(files)
    for skill in {skill_of(rel) for rel in files}:
        if skill not in names:
            raise BadInput(f"{skills_dir}/{skill}: a skill directory must hold {SKILL_FILE} (rule: family layout)")
    if not names:
        raise BadInput(f"{skills_dir}: holds no skill (<skill>/{SKILL_FILE}) (rule: family layout)")
    frontmatter.check_family(files, str(skills_dir), SKILL_FILE, frontmatter_keys)
    return files


def mode_of(rel: str, executables: Collection[str]) -> str:
    """A file's mode as git records it: 100755 for an executable file, 100644 otherwise."""
    return "100755" if rel in executables else "100644"


def tree_digest(files: Mapping[str, bytes], executables: Collection[str] = ()) -> str:
    """The digest of a skill family or an overlay, modes included: framed_digest over ("<mode> <path>", bytes),
    so a `chmod +x` is a different family (docs/formats.md). The one digest the bench, freeze and apply use."""
    return framed_digest((f"{mode_of(rel, executables)} {rel}", data) for rel, data in files.items())


def skill_names_in(files: Mapping[str, bytes]) -> list[str]:
    return sorted(rel.split("/")[0] for rel in files if rel.count("/") == 1 and rel.endswith("/" + SKILL_FILE))


def check_evolvable(evolvable: Iterable[str], family: dict[str, bytes], source: str = "params.yaml") -> None:
    """Every name params skills.evolvable gives is a skill of the family: a misspelt one would let the proposer
    change nothing it names, and the generation is paid for nothing."""
    known = skill_names_in(family)
    for name in evolvable:
        if name not in known:
            raise BadInput(f"{source}: skills.evolvable: {name!r} is not a skill of the family "
                           f"({', '.join(known) or 'none'}) (rule: evolvable skills exist)")


def skill_names(skills_dir: str | Path) -> list[str]:
    return skill_names_in(read_family(skills_dir))


def destinations(rels: list[str] | set[str], roots: tuple[str, ...]) -> list[str]:
    """Every repo path an apply would rewrite: each family-relative file under the canonical root and each mirror."""
    return sorted(f"{repo_dir(root)}/{rel}" for rel in rels for root in roots)
