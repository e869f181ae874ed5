"""`skillevo task add --from-commit FIX`: a task from a fix the team already made, with the tests that came with it.

    skillevo task add --from-commit 1a2b3c4                    # in the pipeline's folder (evolve/)
    skillevo task add --from-commit v2.1-fix --id parse-dates --verify "python3 -m pytest -q tests/test_dates.py"
    skillevo task add --from-range v2.0..main                   # every fix in a range, or a branch's: main..fixes

The task's `ref` is the fix's parent (the code with the bug), its `solution` the fix itself (what the offline
simulator plays, and what check runs verify and the oracle with), its hidden oracle the test files the fix added or
changed, as the fix has them (copied into tasks/oracles/<id>/, never into a workspace), its prompt the fix's commit
message, and its visible `verify` pytest on the same paths, selecting the test functions the fix added (absent at
the bug, so verify fails there; the prompt names them), or --verify.
A fix that touches no test file is refused: it brings nothing to judge a run by. With --from-range A..B each commit of
the range (merges left out, oldest first, at most MAX_RANGE) is tried so: the ones that make a task are added (an id
taken already gets the commit's short hash), the others are listed with the rule that left them out. The task is
appended to the tasks file (replacing init's placeholder task, if it is still there) and the file is loaded back by
the one task loader before anything is kept; `skillevo check` then says
whether the task measures anything (verify and the oracle must fail at the bug and pass with the fix).
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from skillevo.core import layout, placeholder, stage, tasks
from skillevo.files import safefs
from skillevo.files.errors import BadInput

TEST_FILE = re.compile(r"(^|/)(tests?/.*\.py|test_[^/]*\.py|[^/]*_test\.py)$")
MAX_ORACLE_BYTES = 1 << 20
MAX_MESSAGE = 2000


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-C", str(repo), *args], capture_output=True,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1",
                               "HOME": os.environ.get("HOME", "/nonexistent")})
    if done.returncode != 0:
        raise BadInput(f"{repo}: git {' '.join(args)}: {done.stderr.decode(errors='replace').strip()[-300:]}")
    return done.stdout.decode(errors="replace")


def _test_names(repo: Path, commit: str, path: str) -> dict[str, str]:
    """The test functions of a Python test file at a commit, by name, with their source (none when it is absent or
    does not parse)."""
    done = subprocess.run(["git", "-C", str(repo), "cat-file", "blob", f"{commit}:{path}"], capture_output=True)
    if done.returncode != 0 or len(done.stdout) > MAX_ORACLE_BYTES:
        return {}
    text = done.stdout.decode(errors="replace")
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    return {node.name: ast.get_source_segment(text, node) or "" for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")}


def _new_tests(repo: Path, parent: str, fix: str, paths: list[str]) -> list[str]:
    """The test functions the fix added: absent at the bug, so a visible check that selects them fails there."""
    found = []
    for path in paths:
        before = _test_names(repo, parent, path)
        found += [name for name in _test_names(repo, fix, path) if name not in before]
    return sorted(set(found))


def _slug(subject: str) -> str:
    words = re.sub(r"[^A-Za-z0-9]+", "-", subject.lower()).strip("-")
    return (words[:48].rstrip("-") or "fix")


def from_commit(tasks_file: Path, fix: str, *, task_id: str | None = None, verify: str | None = None,
                prompt: str | None = None) -> dict:
    """The task a fix commit makes (and its oracle files, written), appended to `tasks_file`; returns it."""
    folder = tasks_file.parent
    repo = Path(_git(folder, "rev-parse", "--show-toplevel").strip())
    sha = _git(repo, "rev-parse", "--verify", "--quiet", f"{fix}^{{commit}}").strip()
    parents = _git(repo, "rev-list", "--parents", "-n", "1", sha).split()[1:]
    if len(parents) != 1:
        raise BadInput(f"--from-commit {fix}: {sha[:12]} has {len(parents)} parents (rule: a fix is one commit on "
                       "one parent: its parent is the code with the bug)")
    changed = [line.split("\t") for line in _git(repo, "diff", "--no-renames", "--name-status", "--no-ext-diff",
                                                 parents[0], sha).splitlines()]
    pipeline = Path(os.path.relpath(folder.resolve().parent, repo.resolve()))  # its own oracles are no tests of a fix
    tests_changed = sorted(path for status, path in changed if status in ("A", "M") and TEST_FILE.search(path)
                           and (pipeline == Path(".") or not Path(path).is_relative_to(pipeline)))
    if not tests_changed:
        raise BadInput(f"--from-commit {fix}: {sha[:12]} adds or changes no test file (rule: a task from a commit "
                       "needs the tests the fix brought; they are its hidden oracle)")
    names = [Path(p).name for p in tests_changed]
    if len(set(names)) != len(names):
        raise BadInput(f"--from-commit {fix}: two test files share a name ({', '.join(tests_changed)}) (rule: the "
                       "oracle's files sit side by side)")
    message = _git(repo, "log", "-1", "--format=%B", sha).strip()[:MAX_MESSAGE]
    task_id = task_id or _slug(message.splitlines()[0] if message else sha[:12])
    doc = yaml.safe_load(safefs.read_text(tasks_file, max_bytes=8 << 20, what="tasks file")) or {}
    existing = {t["id"] for t in doc.get("tasks") or []}
    if task_id in existing:
        raise BadInput(f"{tasks_file}: task {task_id!r} exists (rule: unique task ids; give --id)")
    oracle_dir = folder / "oracles" / task_id
    if oracle_dir.exists():
        raise BadInput(f"{oracle_dir}: exists (rule: an oracle is never written over)")
    quoted = " ".join(f'"$SKILLEVO_ORACLE_DIR/{name}"' for name in names)
    added = _new_tests(repo, parents[0], sha, tests_changed)
    selected = f" -k {shlex.quote(' or '.join(added))}" if added else ""
    asked = (f"\nAdd tests named {', '.join(added)} in {', '.join(tests_changed)}." if added else
             f"\nAdd or update tests in {', '.join(tests_changed)}.")
    task = {
        "id": task_id, "class": "from-commit", "target": os.path.relpath(repo, folder), "ref": parents[0],
        "prompt": (prompt or message or f"Fix what commit {sha[:12]} fixes.") + asked,
        "verify": verify or f"python3 -m pytest -q -p no:cacheprovider {' '.join(tests_changed)}{selected}",
        "oracle": {"command": f'python3 -m pytest -q -p no:cacheprovider --rootdir="$SKILLEVO_ORACLE_DIR" {quoted}',
                   "files": [{"source": f"{task_id}/{name}", "target": name} for name in names]},
        "solution": {"ref": sha},
    }
    original = tasks_file.read_bytes()
    written: list[Path] = []
    try:
        for path, name in zip(tests_changed, names, strict=True):
            data = subprocess.run(["git", "-C", str(repo), "cat-file", "blob", f"{sha}:{path}"], capture_output=True,
                                  check=True).stdout
            if len(data) > MAX_ORACLE_BYTES:
                raise BadInput(f"{sha[:12]}:{path}: over {MAX_ORACLE_BYTES} bytes (rule: an oracle file is a test)")
            oracle_dir.mkdir(parents=True, exist_ok=True)
            written.append(oracle_dir / name)
            safefs.create_at(None, oracle_dir / name, data)
        safefs.write_atomic(tasks_file, _with(original, doc, task).encode())
        tasks.load(tasks_file, target_roots=[repo])  # the one loader: what is kept, the bench will read
    except BaseException:
        safefs.write_atomic(tasks_file, original)
        for done in written:
            done.unlink(missing_ok=True)
        if oracle_dir.is_dir() and not any(oracle_dir.iterdir()):
            oracle_dir.rmdir()
        raise
    for replaced in doc.get("tasks") or []:  # init's placeholder: its oracle goes with it
        if replaced.get("class") == placeholder.PLACEHOLDER_CLASS:
            for f in replaced.get("oracle", {}).get("files", []):
                (folder / "oracles" / f["source"]).unlink(missing_ok=True)
    return task


MAX_RANGE = 200  # commits one --from-range may walk: a typo'd range (a whole history) is refused, not imported


def from_range(tasks_file: Path, spec: str) -> tuple[list[dict], list[str]]:
    """Every task the commits of `spec` (A..B) make, oldest first: (the tasks added, one line per commit left out)."""
    if ".." not in spec or spec.startswith("-"):
        raise BadInput(f"--from-range {spec}: not a range A..B (rule: a range of commits; one fix: --from-commit)")
    repo = Path(_git(tasks_file.parent, "rev-parse", "--show-toplevel").strip())
    commits = _git(repo, "rev-list", "--reverse", "--no-merges", spec, "--").split()
    if not commits:
        raise BadInput(f"--from-range {spec}: holds no commit (rule: a range of commits)")
    if len(commits) > MAX_RANGE:
        raise BadInput(f"--from-range {spec}: {len(commits)} commits, over {MAX_RANGE} (rule: a range is the fixes "
                       "you mean; narrow it)")
    added, skipped = [], []
    for sha in commits:
        subject = _git(repo, "log", "-1", "--format=%s", sha).strip()
        doc = yaml.safe_load(safefs.read_text(tasks_file, max_bytes=8 << 20, what="tasks file")) or {}
        have = {(t.get("solution") or {}).get("ref"): t["id"] for t in doc.get("tasks") or []}
        if sha in have:
            skipped.append(f"{sha[:12]} {subject[:60]!r}: already task {have[sha]!r} (rule: one task per fix)")
            continue
        slug = _slug(subject or sha[:12])
        task_id = slug if slug not in {t["id"] for t in doc.get("tasks") or []} else f"{slug}-{sha[:7]}"
        try:
            added.append(from_commit(tasks_file, sha, task_id=task_id))
        except BadInput as e:
            skipped.append(f"{sha[:12]} {subject[:60]!r}: {e}")
    return added, skipped


def _with(original: bytes, doc: dict, task: dict) -> str:
    """The tasks file with `task` at its end: appended as text, so the team's comments and layout stay, unless the
    file still holds init's placeholder, which the first real task replaces (the file's leading comments kept)."""
    if not any(t.get("class") == placeholder.PLACEHOLDER_CLASS for t in doc.get("tasks") or []):
        text = original.decode()
        return text + ("" if text.endswith("\n") else "\n") + yaml.safe_dump([task], sort_keys=False)
    header = "".join(line for line in original.decode().splitlines(keepends=True)[:50] if line.startswith("#"))
    kept = [t for t in doc["tasks"] if t.get("class") != placeholder.PLACEHOLDER_CLASS]
    return header + yaml.safe_dump({**doc, "tasks": [*kept, task]}, sort_keys=False)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="skillevo task", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["add"])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-commit", help="the fix: a commit, tag or branch of this repository")
    source.add_argument("--from-range", help="A..B: every commit of the range that brings tests (a branch: main..B)")
    p.add_argument("--id", default=None, help="the task's id [from the commit's subject]")
    p.add_argument("--verify", default=None, help="the visible check [pytest on the test files the fix touched]")
    p.add_argument("--prompt", default=None, help="what the agent is asked [the commit message]")
    p.add_argument("--tasks", type=Path, default=layout.TASKS_FILE, help="[%(default)s]")
    return p


def run(args: argparse.Namespace) -> str:
    if args.from_range is not None:
        if args.id or args.verify or args.prompt:
            raise BadInput("--id, --verify and --prompt name one task: give them with --from-commit (rule: one task "
                           "each)")
        added, skipped = from_range(args.tasks, args.from_range)
        for line in skipped:
            print(f"task add: left out {line}", file=sys.stderr, flush=True)
        for task in added:
            print(f"task add: {task['id']}: ref {task['ref'][:12]}, solution {task['solution']['ref'][:12]}",
                  flush=True)
        if not added:
            raise BadInput(f"--from-range {args.from_range}: no commit made a task ({len(skipped)} left out above) "
                           "(rule: a task from a commit needs the tests the fix brought)")
        return (f"task add: {len(added)} task(s) from {args.from_range}, {len(skipped)} commit(s) left out; next: "
                "`skillevo check` runs them")
    task = from_commit(args.tasks, args.from_commit, task_id=args.id, verify=args.verify, prompt=args.prompt)
    files = ", ".join(f["target"] for f in task["oracle"]["files"])
    return (f"task add: {task['id']}: ref {task['ref'][:12]} (the fix's parent), solution "
            f"{task['solution']['ref'][:12]}, hidden oracle {files}; next: `skillevo check` runs it")


def main(argv: list[str] | None = None) -> int:
    return stage.main("task", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
