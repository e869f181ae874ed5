"""`skillevo init [DIR]`: set this repository up to evolve its own skills, in a folder of its own.

    skillevo init evolve                           # .claude/skills, found; the pipeline in evolve/
    skillevo init evolve --skills .claude/skills --mirrors plugins/x/skills
    skillevo init evolve --mirrors                 # no mirrors, even where copies were found

Writes DIR/dvc.yaml (the pipeline this package ships, the same file skillevo's own demo runs), DIR/params.yaml
(skills and mirrors relative to the repository's git root, the mirrors by default every committed byte copy of the
family found in it, the root relative to DIR, every skill evolvable, an `auto` arm and a skill-free `baseline`,
an arm per evolvable skill while there are at most six, the offline simulator), DIR/tasks/ with a placeholder task
to replace (`skillevo task add --from-commit FIX` does; `skillevo check` lists it as a to-do) or, with --example,
a small real task on this repository that checks and runs offline end to end, DIR/skill-modes.json, and .gitignore and
.dvcignore entries; runs `dvc init` at the git root when the repository has no DVC yet. Nothing it would
overwrite is touched: an existing file is refused, one line each. Paths outside the git root, and any path it
would write through a symlink, are refused before anything is written; it writes all or nothing.
Then: `skillevo check`, `dvc repro` in DIR, `skillevo apply` there after a promotion.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from skillevo.core import config, layout, modes, placeholder, sampling, stage
from skillevo.files import safefs
from skillevo.files.errors import BadInput, BrokenEnvironment
from skillevo.files.schemas import fill_defaults, load_schema

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
ORACLE_COMMAND = ('python3 -m pytest -q -p no:cacheprovider --rootdir="$SKILLEVO_ORACLE_DIR" '
                  '"$SKILLEVO_ORACLE_DIR/test_example_oracle.py"')
EXAMPLE_FILE = "skillevo_example/greeting.txt"  # what the --example task asks for; refused if the repository has it
EXAMPLE_LINE = "hello from skillevo"
EXAMPLE_TEST = f'''"""The hidden check of the example task: the file holds exactly the line asked for (verify asks
only that it exists). Run from the workspace's root; the agent never sees this file."""

from pathlib import Path


def test_the_file_holds_the_line():
    assert Path("{EXAMPLE_FILE}").read_text() == "{EXAMPLE_LINE}\\n"
'''
EXAMPLE_PATCH = f"""diff --git a/{EXAMPLE_FILE} b/{EXAMPLE_FILE}
new file mode 100644
--- /dev/null
+++ b/{EXAMPLE_FILE}
@@ -0,0 +1 @@
+{EXAMPLE_LINE}
"""
MAX_SKILL_ARMS = 6  # beyond it, one arm per skill costs more incumbent sessions than a first run should: none written
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


def skill_arms(evolvable: list[str]) -> dict[str, dict]:
    """One arm per evolvable skill, its prompt naming the skill: under `auto` a model may load one skill every time
    (the offline simulator's does), and a skill no run loads can never be measured, so never moved. Arm names are
    `skill_<name>` in the schema's alphabet, made unique."""
    out: dict[str, dict] = {}
    for name in evolvable[:MAX_SKILL_ARMS] if len(evolvable) <= MAX_SKILL_ARMS else []:
        arm = base = "skill_" + re.sub(r"[^A-Za-z0-9_]", "_", name)[:40]
        while arm in out:
            arm = f"{base}_{len(out)}"
        out[arm] = {"sessions": [{"skill": name, "prompt": f"Use the {name} skill for: {{prompt}}\n" + FINISH}]}
    return out


FINISH = "Run the verification in the foreground before you finish."


def params_doc(root_rel: str, skills: str, mirrors: list[str], evolvable: list[str]) -> dict:
    """The params a new pipeline starts from, every key written out (DVC reads the keys dvc.yaml names from the
    file itself, and knows nothing of the schema's defaults)."""
    prompt = "{prompt}\n" + FINISH
    return fill_defaults({
        "model": {"backend": "simulator", "name": "claude-sonnet-4-6", "base_url": None, "effort": None},
        "skills": {"evolvable": evolvable, "root": root_rel, "paths": {"skills": skills, "mirrors": mirrors},
                   "frontmatter_keys": []},
        "tasks": {"target_roots": [root_rel], "gate": [], "evidence": [], "shared": False},
        "arms": {"auto": {"sessions": [{"skill": "auto", "prompt": prompt}]}, **skill_arms(evolvable),
                 "baseline": {"sessions": [{"skill": "none", "prompt": prompt}]}},
    }, load_schema(config.SCHEMA))


def _example_tasks(tasks_to_root: str) -> dict:
    return {"schema_version": 1, "tasks": [{
        "id": "example", "class": placeholder.PLACEHOLDER_CLASS, "target": tasks_to_root, "ref": "HEAD",
        "prompt": "Replace with the task an agent gets: what to change, where, and which tests to add.",
        "verify": "python3 -m pytest -q -p no:cacheprovider",
        "oracle": {"command": ORACLE_COMMAND, "files": [{"source": "test_example_oracle.py",
                                                  "target": "test_example_oracle.py"}]}}]}


def _real_example(tasks_to_root: str, root: Path) -> dict:
    """A task any repository can run offline: create one small file. Pinned to the commit init ran at, solved by a
    patch, checked by a hidden script that asks more than verify does."""
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "-q", "HEAD^{commit}"],
                          capture_output=True, text=True)
    if head.returncode != 0:
        raise BadInput(f"{root}: no commit yet; --example pins its task to one (rule: a task's ref is a commit)")
    there = subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"HEAD:{EXAMPLE_FILE}"], capture_output=True)
    if there.returncode == 0:
        raise BadInput(f"{root}: {EXAMPLE_FILE} is already committed, so the example task would be solved as "
                       "given (rule: a task is unsolved at its ref)")
    return {"schema_version": 1, "tasks": [{
        "id": "example", "class": "example-file", "target": tasks_to_root, "ref": head.stdout.strip(),
        "prompt": f"Create the file {EXAMPLE_FILE} holding exactly one line: {EXAMPLE_LINE}",
        "verify": f"test -s {EXAMPLE_FILE}",
        "oracle": {"command": ORACLE_COMMAND, "files": [{"source": "test_example_oracle.py",
                                                          "target": "test_example_oracle.py"}]},
        "solution": {"patch": "example.patch"}}]}


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


def init(folder: Path, skills: str | None, mirrors: list[str] | None, example: bool = False) -> list[Path]:
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
    tasks_to_root = os.path.relpath(root.resolve(), folder / "tasks")
    if example:
        task_files = {folder / "tasks/oracles/test_example_oracle.py": EXAMPLE_TEST.encode(),
                      folder / "tasks/solutions/example.patch": EXAMPLE_PATCH.encode()}
        tasks_doc = _real_example(tasks_to_root, root)
    else:
        task_files = {folder / "tasks/oracles/test_example_oracle.py": EXAMPLE_ORACLE.encode()}
        tasks_doc = _example_tasks(tasks_to_root)
    files = {
        folder / "dvc.yaml": (TEMPLATE / "pipeline.yaml").read_bytes(),
        folder / "params.yaml": (b"# skillevo params (schema: skillevo/schemas/params.schema.json; docs/formats.md)\n"
                                 + yaml.safe_dump(params_doc(root_rel, skills, mirrors, names), sort_keys=False)
                                 .encode()),
        folder / "tasks/tasks.yaml": TASKS_HEADER + yaml.safe_dump(tasks_doc, sort_keys=False).encode(),
        **task_files,
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
        for path, saved in before.items():
            if saved is None:
                path.unlink(missing_ok=True)
            else:
                safefs.write_atomic(path, saved)
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
    p.add_argument("--example", action="store_true",
                   help="a small real task on this repository (create one file) instead of a placeholder: check "
                        "passes and `dvc repro` runs offline at once")
    return p


def plan_line(params_file: Path) -> str:
    """The plan init wrote, in words: the arms and the schedule a promotion needs, read back from the file written
    and judged by the rule `skillevo check` applies (sampling.unpromotable), so the line cannot disagree with either."""
    params = config.load(params_file)
    skill = [a for a in params.arms if a.startswith("skill_")]
    evolvable = params.skills.evolvable
    per_skill = (f"one arm per evolvable skill ({', '.join(skill)})" if skill else
                 f"no arm per skill ({len(evolvable)} evolvable skills would each add an arm of incumbent sessions; "
                 "add arms for the skills your tasks need, docs/formats.md, Arms): until then only auto can load them")
    runs, looks = params.sampling.runs, params.sampling.sequential
    stops = f", in looks from {looks.first} that stop once the answer is known" if looks.enabled else ""
    can = next((n for n in range(1, 100) if not sampling.unpromotable(n, params.sampling, params.gate)), None)
    reach = (f"it can promote with {can} gate task(s) or more" if can is not None else
             "no number of gate tasks can reach a promotion (raise sampling.runs)")
    return (f"the plan: arms {', '.join(params.arms)}, {per_skill}; the candidate side runs up to {runs} runs per "
            f"gate task and arm{stops}; a promotion needs {params.gate.min_total_runs} valid runs per arm "
            f"(gate.min_total_runs): {reach}")


def run(args: argparse.Namespace) -> str:
    written = init(args.folder, args.skills, args.mirrors, args.example)
    plan = plan_line(args.folder / "params.yaml")
    todo = "" if args.example else f"edit {args.folder}/tasks/tasks.yaml (or `skillevo task add`), "
    return (f"init: {len(written)} files in {args.folder}; {plan}; next: {todo}commit, then "
            f"`skillevo check` and `dvc repro` in {args.folder}; commit {args.folder}/dvc.lock after each repro: it is "
            "the generation's record, which `skillevo apply` checks every output against")


def main(argv: list[str] | None = None) -> int:
    return stage.main("init", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
