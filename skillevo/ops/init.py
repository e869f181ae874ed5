"""`skillevo init [DIR]`: set this repository up to evolve its own skills, in a folder of its own.

    skillevo init evolve                           # .claude/skills, found; the pipeline in evolve/
    skillevo init evolve --skills .claude/skills --mirrors plugins/x/skills
    skillevo init evolve --mirrors                 # no mirrors, even where copies were found

Writes DIR/dvc.yaml (the pipeline this package ships, the same file skillevo's own demo runs), DIR/params.yaml
(skills and mirrors relative to the repository's git root, the mirrors by default every committed byte copy of the
family found in it, the root relative to DIR, every skill evolvable, an `auto` arm and a skill-free `baseline`,
the offline simulator), DIR/tasks/ with one worked example on this
repository (fill it in; `skillevo check` says what is still wrong), DIR/skill-modes.json, and .gitignore and
.dvcignore entries; runs `dvc init` at the git root when the repository has no DVC yet. Nothing it would
overwrite is touched: an existing file is refused, one line each. Paths outside the git root, and any path it
would write through a symlink, are refused before anything is written; it writes all or nothing.
Then: `skillevo check`, `dvc repro` in DIR, `skillevo apply` there after a promotion.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

from skillevo.core import config, layout, modes, placeholder, safefs, stage
from skillevo.core.errors import BadInput, BrokenEnvironment
from skillevo.core.schemas import fill_defaults, load_schema

TEMPLATE = Path(__file__).resolve().parents[1] / "template"  # pipeline.yaml: DVC collects any file named dvc.yaml
EXAMPLE_ORACLE = '''"""The hidden check of the example task: replace it with tests that pass only once the task is done.

The agent never sees this file; verify (in tasks.yaml) is the check it may run.
"""


def test_replace_me():
    assert False, "write the hidden test of your task here"
'''
TASKS_HEADER = b"""\
# Tasks (schema: skillevo/schemas/tasks.schema.json; docs/formats.md). Each: a target (this repository, `ref` a
# commit that has the bug), the prompt an agent gets, `verify` (a check it may run), hidden `oracle` tests under
# tasks/oracles/ (never shown to the agent or the proposer), and a reference `solution` with which verify and the
# oracle pass: `solution: {ref: <commit>}` or `solution: {patch: <file under tasks/solutions/>}`. The offline
# simulator plays a task from its solution. `skillevo check` says what is still wrong, one line each.
"""
GITIGNORE = ["/results/", "/.skillevo/", "/previous/memory", "/generations/"]
DVCIGNORE = ["__pycache__/", "*.pyc", ".pytest_cache/", ".hypothesis/", ".skillevo/"]


def _git_root(where: Path) -> Path:
    done = subprocess.run(["git", "-C", str(where), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if done.returncode != 0:
        raise BadInput(f"{where}: not inside a git repository (rule: skillevo evolves a repository's committed skills)")
    return Path(done.stdout.strip())


def _inside(root: Path, rel: str, what: str) -> str:
    """`rel` (relative to the git root) in layout's normal form, refused when it leaves the root."""
    norm = layout.repo_dir(rel)
    resolved = (root / norm).resolve()
    if Path(norm).is_absolute() or not resolved.is_relative_to(root.resolve()) or ".." in Path(norm).parts:
        raise BadInput(f"{what} {rel!r}: must be a directory inside the repository, relative to its git root "
                       f"{root} (rule: paths inside the repository)")
    return norm


def params_doc(root_rel: str, skills: str, mirrors: list[str], evolvable: list[str]) -> dict:
    """The params a new pipeline starts from, every key written out (DVC reads the keys dvc.yaml names from the
    file itself, and knows nothing of the schema's defaults)."""
    prompt = "{prompt}\nRun the verification in the foreground before you finish."
    return fill_defaults({
        "model": {"backend": "simulator", "name": "claude-sonnet-4-6", "base_url": None, "effort": None},
        "skills": {"evolvable": evolvable, "root": root_rel, "paths": {"skills": skills, "mirrors": mirrors},
                   "frontmatter_keys": []},
        "tasks": {"target_roots": [root_rel], "gate": [], "evidence": [], "shared": False},
        "arms": {"auto": {"sessions": [{"skill": "auto", "prompt": prompt}]},
                 "baseline": {"sessions": [{"skill": "none", "prompt": prompt}]}},
    }, load_schema(config.SCHEMA))


def _example_tasks(tasks_to_root: str) -> dict:
    oracle = ('python3 -m pytest -q -p no:cacheprovider --rootdir="$SKILLEVO_ORACLE_DIR" '
              '"$SKILLEVO_ORACLE_DIR/test_example_oracle.py"')
    return {"schema_version": 1, "tasks": [{
        "id": "example", "class": placeholder.PLACEHOLDER_CLASS, "target": tasks_to_root, "ref": "HEAD",
        "prompt": "Replace with the task an agent gets: what to change, where, and which tests to add.",
        "verify": "python3 -m pytest -q -p no:cacheprovider",
        "oracle": {"command": oracle, "files": [{"source": "test_example_oracle.py",
                                                  "target": "test_example_oracle.py"}]}}]}


def _append_lines(path: Path, lines: list[str]) -> None:
    have = path.read_text().splitlines() if path.is_file() else []
    missing = [line for line in lines if line not in have]
    if missing:
        text = path.read_text() if path.is_file() else ""
        path.write_text(text + ("" if not text or text.endswith("\n") else "\n") + "\n".join(missing) + "\n")


def found_mirrors(root: Path, skills: str, family: dict[str, bytes]) -> list[str]:
    """The repository's committed byte copies of the family (a plugin's `skills/`, say): each directory whose
    tracked SKILL.md files name the same skills, then read as the same bytes."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--", "*/SKILL.md", "SKILL.md"],
                            capture_output=True, check=True).stdout.decode(errors="replace").split("\0")
    candidates = {str(Path(rel).parent.parent) for rel in listed if rel.count("/") >= 2}
    out = []
    for rel in sorted(candidates - {skills}):
        try:
            if layout.read_family(root / rel) == family:
                out.append(rel)
        except BadInput:
            continue  # not a family, or not this one
    return out


def init(folder: Path, skills: str | None, mirrors: list[str] | None) -> list[Path]:
    """Write the pipeline into `folder`; returns what was written."""
    root = _git_root(folder if folder.is_dir() and not folder.is_symlink() else folder.parent)
    folder = folder.resolve()
    if not folder.is_relative_to(root.resolve()):
        raise BadInput(f"{folder}: outside the repository {root} (rule: paths inside the repository)")
    skills = _inside(root, skills or ".claude/skills", "--skills")
    family_dir = root / skills
    if not family_dir.is_dir():
        raise BadInput(f"{family_dir}: no skill family there; pass --skills DIR (relative to {root}) "
                       "(rule: an existing family)")
    executables: set[str] = set()
    family = layout.read_family(family_dir, executables=executables)
    names = layout.skill_names_in(family)
    if not names:
        raise BadInput(f"{family_dir}: holds no <skill>/SKILL.md (rule: an existing family)")
    mirrors = [_inside(root, m, "--mirrors") for m in mirrors] if mirrors is not None else found_mirrors(root, skills,
                                                                                                         family)
    root_rel = os.path.relpath(root.resolve(), folder) if folder != root.resolve() else "."
    files = {
        folder / "dvc.yaml": (TEMPLATE / "pipeline.yaml").read_bytes(),
        folder / "params.yaml": (b"# skillevo params (schema: skillevo/schemas/params.schema.json; docs/formats.md)\n"
                                 + yaml.safe_dump(params_doc(root_rel, skills, mirrors, names), sort_keys=False)
                                 .encode()),
        folder / "tasks/tasks.yaml": TASKS_HEADER + yaml.safe_dump(
            _example_tasks(os.path.relpath(root.resolve(), folder / "tasks")), sort_keys=False).encode(),
        folder / "tasks/oracles/test_example_oracle.py": EXAMPLE_ORACLE.encode(),
        folder / "tasks/targets/.gitkeep": b"",
        folder / "tasks/playbooks/.gitkeep": b"",
        folder / "previous/.gitkeep": b"",
        folder / "learnings.jsonl": b"",
        folder / layout.MODES: modes.render(executables),
    }
    taken = [str(p) for p in files if os.path.lexists(p)]
    if taken:
        raise BadInput(f"{', '.join(taken)}: already there; init never overwrites (rule: nothing lost)")
    gitignore, dvcignore = folder / ".gitignore", root.resolve() / ".dvcignore"
    for path in [*files, gitignore, dvcignore, root.resolve() / ".dvc"]:
        _own(root.resolve(), path)
    _write_all(files, gitignore, dvcignore, root)
    return sorted(files)


def _own(root: Path, path: Path) -> None:
    """Refuse, before anything is written, a path init would write through a link or outside the repository: a
    repository's committed symlink (`evolve/tasks -> /etc`) must not make init a writer of the link's target."""
    try:
        parts = safefs.plain_parts(path.relative_to(root).as_posix(), str(path))
        fd, found = safefs.open_existing_below(root, parts[:-1], str(root))
    except (BadInput, ValueError) as e:
        raise BadInput(f"{path}: init writes nothing through a link or outside the repository {root} ({e}) "
                       "(rule: paths inside the repository)") from None
    try:
        if found == len(parts) - 1 and os.path.islink(path):
            raise BadInput(f"{path}: a symlink; init writes nothing through a link (rule: paths inside the "
                           "repository)")
    finally:
        os.close(fd)


def _write_all(files: dict[Path, bytes], gitignore: Path, dvcignore: Path, root: Path) -> None:
    """Every file, the ignore lines and `dvc init`, or none of them: a failure part way undoes what was written."""
    before = {path: path.read_bytes() if path.is_file() else None for path in (gitignore, dvcignore)}
    written: list[Path] = []
    dvc_made = not (root / ".dvc").is_dir()
    try:
        for path, data in files.items():
            safefs.write_atomic(path, data)
            written.append(path)
        _append_lines(gitignore, GITIGNORE)
        if dvc_made:
            done = subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, capture_output=True,
                                  text=True)
            if done.returncode != 0:
                raise BrokenEnvironment(f"dvc init failed in {root}: {done.stderr.strip()[-500:]}")
        _append_lines(dvcignore, DVCIGNORE)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        for path, data in before.items():
            if data is None:
                path.unlink(missing_ok=True)
            else:
                safefs.write_atomic(path, data)
        if dvc_made and (root / ".dvc").is_dir() and not (root / ".dvc").is_symlink():
            safefs.remove_tree(root / ".dvc")
        raise


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="skillevo init", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path, nargs="?", default=Path("evolve"), help="where the pipeline goes [%(default)s]")
    p.add_argument("--skills", default=None, help="the skill family, relative to the git root [.claude/skills]")
    p.add_argument("--mirrors", nargs="*", default=None,
                   help="byte copies of it that apply keeps in step [the committed copies found in the repository]")
    return p


def run(args: argparse.Namespace) -> str:
    written = init(args.folder, args.skills, args.mirrors)
    return (f"init: {len(written)} files in {args.folder}; next: edit {args.folder}/tasks/tasks.yaml, commit, then "
            f"`skillevo check` and `dvc repro` in {args.folder}; commit {args.folder}/dvc.lock after each repro: it is "
            "the generation's record, which `skillevo apply` checks every output against")


def main(argv: list[str] | None = None) -> int:
    return stage.main("init", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
