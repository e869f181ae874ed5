"""Benchmark tasks: load tasks.yaml, refuse anything unsafe, and pin each task to exact bytes.

A *task binding* says exactly what was measured: the target's tree (a git commit, or a content digest
for a plain directory), the sha256 of the prompt, setup, verify and oracle command, and every hidden
oracle file's target, sha256 and size. Bindings are computed once per generation; a run whose inputs
drift from its bindings is not comparable with the others.

A target is copied into every agent workspace and so reaches the model: it must resolve inside the tasks
directory or under a root that params.yaml `tasks.target_roots` names explicitly.
"""

from __future__ import annotations

import ast
import io
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillevo.files import documents, safefs
from skillevo.files.digests import framed_digest, sha256_bytes, sha256_json, sha256_text
from skillevo.files.errors import BadInput
from skillevo.files.schemas import fill_defaults, load_schema, validate

MAX_TASKS_BYTES = 4 << 20
MAX_ORACLE_FILE = 512 << 10
MAX_ORACLE_TOTAL = 2 << 20
MAX_TARGET_FILE = 64 << 20
MAX_TARGET_TOTAL = 1 << 30
IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache"})  # tool caches a developer may leave in a target
# What the CLI would load from a project as skills, settings (hooks), agents, commands, memory or MCP servers: the
# bench installs the family under test itself, so a target's own copies (any commit of a repository that ships
# skills has them) never reach a workspace, at any depth (the CLI also finds nested .claude/ and CLAUDE.md).
AGENT_CONFIG_DIRS = frozenset({".claude"})
AGENT_CONFIG_FILES = frozenset({"CLAUDE.md", "CLAUDE.local.md", ".mcp.json"})


def agent_config(rel: str) -> bool:
    """True for a target path the agent's CLI would load as project configuration (it is left out of workspaces)."""
    parts = rel.strip("/").split("/")
    return any(part in AGENT_CONFIG_DIRS for part in parts[:-1]) or parts[-1] in AGENT_CONFIG_DIRS | AGENT_CONFIG_FILES


MAX_SOLUTION_PATCH = 4 << 20


class TaskError(BadInput):
    """A task definition is unsafe or inconsistent; the message names the task, the field and the rule."""


@dataclass(frozen=True)
class Task:
    id: str
    cls: str
    prompt: str
    setup: str | None
    verify: str
    oracle_command: str
    oracle_files: tuple[tuple[str, bytes], ...]  # (target, bytes), sorted by target
    expensive: bool
    timeout_s: int
    target_dir: Path
    target_kind: str  # git | dir
    tree: str  # commit (git) or content digest (dir)
    binding: dict[str, Any]
    # Paths of the target that never reach a workspace beside agent configuration: the pipeline's own folder when
    # a task targets the repository that holds it (its tasks/ has the oracles and solutions).
    hidden: tuple[str, ...] = ()
    solution: Solution | None = None

    def in_workspace(self, rel: str) -> bool:
        """Whether a path of the target's tree reaches the agent's workspace (the one rule every copy follows)."""
        rel = rel.strip("/")
        return not agent_config(rel) and not any(rel == h or rel.startswith(h + "/") for h in self.hidden)

    @property
    def binding_digest(self) -> str:
        return sha256_json(self.binding)


@dataclass(frozen=True)
class Solution:
    """A task's reference solution: a commit of its git target (`ref`) or a patch from tasks/solutions/. It never
    reaches a workspace; `skillevo check` and the bench run the checks with it, the offline simulator plays from it."""

    kind: str  # ref | patch
    commit: str | None = None
    patch: bytes | None = None

    @property
    def binding(self) -> dict[str, str]:
        if self.kind == "ref":
            return {"kind": "ref", "commit": str(self.commit)}
        return {"kind": "patch", "sha256": sha256_bytes(self.patch or b"")}


def _fail(task_id: str, field: str, rule: str, source: Path) -> TaskError:
    return TaskError(f"{source}: task {task_id!r}: {field}: {rule}")


def dir_entries(root: Path) -> list[tuple[str, bytes]]:
    """Every regular file under a plain-directory target; links and special files are refused."""
    return sorted(safefs.read_tree(root, max_file_bytes=MAX_TARGET_FILE, max_total_bytes=MAX_TARGET_TOTAL,
                                   ignore=IGNORED_DIRS, what="target file").items())


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _resolve_target(raw: dict[str, Any], base: Path, roots: tuple[Path, ...], source: Path) -> tuple[Path, str, str]:
    tid = raw["id"]
    target = (base / raw["target"]).absolute()
    real = Path(os.path.realpath(target))
    allowed = (Path(os.path.realpath(base)), *(Path(os.path.realpath(r)) for r in roots))
    if not any(_inside(real, root) for root in allowed):
        raise _fail(tid, "target", f"{raw['target']} resolves to {real}, outside {base} and every params "
                                   "tasks.target_roots entry (rule: targets stay inside the tasks directory or an "
                                   "allowed root)", source)
    if target.is_symlink() or not target.is_dir():
        raise _fail(tid, "target", f"{raw['target']} must be an existing directory, not a symlink", source)
    if (target / ".git").exists():
        ref = raw.get("ref", "HEAD")
        out = subprocess.run(["git", "-C", str(target), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise _fail(tid, "ref", f"{ref!r} does not name a commit in {raw['target']}", source)
        return target, "git", out.stdout.strip()
    if "ref" in raw:
        raise _fail(tid, "ref", "ref applies to git targets only; this target is a plain directory "
                    "(rule: refs on git targets)", source)
    try:
        return target, "dir", framed_digest(dir_entries(target))
    except BadInput as e:
        raise _fail(tid, "target", f"refused: {e}", source) from None


def _solution(raw: dict[str, Any], target: Path, kind: str, tasks_dir: Path, source: Path) -> Solution | None:
    tid, sol = raw["id"], raw.get("solution")
    if sol is None:
        return None
    if "ref" in sol:
        if kind != "git":
            raise _fail(tid, "solution.ref", "applies to git targets only; give a patch for a plain directory "
                        "(rule: refs on git targets)", source)
        out = subprocess.run(["git", "-C", str(target), "rev-parse", "--verify", "--quiet", f"{sol['ref']}^{{commit}}"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise _fail(tid, "solution.ref", f"{sol['ref']!r} does not name a commit in {raw['target']}", source)
        return Solution("ref", commit=out.stdout.strip())
    try:
        data = safefs.read_below(tasks_dir / "solutions", sol["patch"], max_bytes=MAX_SOLUTION_PATCH,
                                 what="solution patch")
    except BadInput as e:
        raise _fail(tid, "solution.patch", f"refused: {e}", source) from None
    return Solution("patch", patch=data)


def _hidden(target: Path, tasks_dir: Path) -> tuple[str, ...]:
    """The pipeline's folder (the tasks directory's parent) as a path of the target when the target holds it: the
    whole folder unless it is the target's root, then the tasks directory alone."""
    target, tasks_dir = Path(os.path.realpath(target)), Path(os.path.realpath(tasks_dir))
    if not _inside(tasks_dir, target) or tasks_dir == target:
        return ()
    folder = tasks_dir.parent if tasks_dir.parent != target else tasks_dir
    return (folder.relative_to(target).as_posix(),)


def _oracle_files(raw: dict[str, Any], oracle_root: Path, source: Path) -> tuple[tuple[str, bytes], ...]:
    tid, files = raw["id"], raw["oracle"]["files"]
    for key in ("source", "target"):
        names = [f[key] for f in files]
        if len(set(names)) != len(names):
            raise _fail(tid, f"oracle.files[].{key}", "must be unique", source)
    out, total = [], 0
    for f in files:
        try:
            data = safefs.read_below(oracle_root, f["source"], max_bytes=MAX_ORACLE_FILE, what="oracle file")
        except BadInput as e:
            raise _fail(tid, "oracle.files[].source", f"refused: {e}", source) from None
        total += len(data)
        if total > MAX_ORACLE_TOTAL:
            raise _fail(tid, "oracle.files", f"oracle files exceed {MAX_ORACLE_TOTAL} bytes in all "
                                             "(rule: oracle size)", source)
        out.append((f["target"], data))
    return tuple(sorted(out))


def oracle_tests(files: tuple[tuple[str, bytes], ...], task_id: str, source: Path) -> list[str]:
    """The oracle's test ids as a JUnit report names them (`<dotted module>[.<Class>]::<test>`), read from the
    bound files: the oracle's outcome is matched against these, never taken from an exit status alone."""
    ids = []
    for target, data in files:
        if not target.endswith(".py"):
            continue
        module = target.removesuffix(".py").replace("/", ".")
        try:
            tree = ast.parse(data.decode("utf-8"), filename=target)
        except (SyntaxError, UnicodeDecodeError, ValueError) as e:
            raise _fail(task_id, "oracle.files", f"{target} is not Python source: {e} (rule: oracle tests)",
                        source) from e
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                ids.append(f"{module}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                ids += [f"{module}.{node.name}::{item.name}" for item in node.body
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name.startswith("test")]
    if not ids:
        raise _fail(task_id, "oracle.files", "no test function (test_*) in any .py oracle file: the oracle's outcome "
                                             "is matched against its tests (rule: oracle tests)", source)
    return sorted(set(ids))


def load(path: str | Path, *, target_roots: Iterable[str | Path] = ()) -> list[Task]:
    """Every task of a tasks file, validated (defaults from its schema) and bound."""
    source = Path(path)
    doc = documents.load_yaml(source, what="tasks file", max_bytes=MAX_TASKS_BYTES)
    doc = validate(fill_defaults(doc, load_schema("tasks")), "tasks", source)
    base, oracle_root = source.parent, source.parent / "oracles"
    roots = tuple(Path(r) for r in target_roots)
    tasks, seen = [], set()
    for raw in doc["tasks"]:
        if raw["id"] in seen:
            raise _fail(raw["id"], "id", "duplicate task id (rule: unique task ids)", source)
        seen.add(raw["id"])
        target, kind, tree = _resolve_target(raw, base, roots, source)
        oracle = _oracle_files(raw, oracle_root, source)
        solution = _solution(raw, target, kind, base, source)
        hidden = _hidden(target, base)
        binding = {
            "id": raw["id"],
            "class": raw["class"],
            "expensive": raw["expensive"],
            "timeout_s": raw["timeout_s"],
            "target": {"kind": kind, "path": raw["target"], "tree": tree},
            "prompt_sha256": sha256_text(raw["prompt"]),
            "setup_sha256": sha256_text(raw["setup"]) if "setup" in raw else None,
            "verify_sha256": sha256_text(raw["verify"]),
            "oracle_command_sha256": sha256_text(raw["oracle"]["command"]),
            "oracle_files": [{"target": t, "sha256": sha256_bytes(d), "size": len(d)} for t, d in oracle],
            "oracle_tests": oracle_tests(oracle, raw["id"], source),
        }
        if solution is not None:  # only when there is one: bindings (and cell keys) of other tasks stay as they were
            binding["solution"] = solution.binding
        if hidden:
            binding["hidden"] = list(hidden)
        tasks.append(Task(id=raw["id"], cls=raw["class"], prompt=raw["prompt"], setup=raw.get("setup"),
                          verify=raw["verify"], oracle_command=raw["oracle"]["command"], oracle_files=oracle,
                          expensive=binding["expensive"], timeout_s=binding["timeout_s"], target_dir=target,
                          target_kind=kind, tree=tree, binding=binding, hidden=hidden, solution=solution))
    return tasks


def select(tasks: list[Task], include_expensive: bool) -> tuple[list[Task], list[dict[str, str]]]:
    """(tasks to run, skipped tasks with the reason) — reports list what was skipped."""
    chosen = [t for t in tasks if include_expensive or not t.expensive]
    skipped = [{"id": t.id, "reason": "expensive: true (pass --include-expensive to run it)"}
               for t in tasks if t.expensive and not include_expensive]
    if not chosen:
        raise TaskError("no task left to run after skipping expensive tasks")
    return chosen, skipped


@dataclass(frozen=True)
class Split:
    """Which tasks the proposer may learn from and which the gate judges on: disjoint unless params say
    `shared`, because a skill tuned to the tasks it is judged on overfits them."""

    evidence: tuple[str, ...]
    gate: tuple[str, ...]
    automatic: bool

    def to_dict(self) -> dict[str, list[str]]:
        return {"evidence": list(self.evidence), "gate": list(self.gate)}


def split(tasks: Iterable[Task], gate: Iterable[str], evidence: Iterable[str], shared: bool, source: str) -> Split:
    """The split params name (`tasks.gate`, `tasks.evidence`, `tasks.shared`), completed and checked against
    the tasks file. With neither list, every third task (ordered by class, then id) is an evidence task and the
    rest are gate tasks, so fewer than three tasks are all the gate's; with one list, the other is the rest."""
    tasks = list(tasks)
    ids = [t.id for t in tasks]
    gate, evidence = list(gate), list(evidence)
    for key, named in (("gate", gate), ("evidence", evidence)):
        for task_id in named:
            if task_id not in ids:
                raise TaskError(f"{source}: tasks.{key}: {task_id!r} is not a task in the tasks file "
                                "(rule: known task)")
    automatic = not gate and not evidence
    if automatic:  # every third task, by class then id: classes spread over both sets, and the gate gets most
        ordered = sorted(tasks, key=lambda t: (t.cls, t.id))
        evidence = [task.id for i, task in enumerate(ordered) if i % 3 == 2]
    if not gate:
        gate = [task_id for task_id in ids if task_id not in evidence]
    if not evidence:
        evidence = [task_id for task_id in ids if task_id not in gate]
    both = sorted(set(gate) & set(evidence))
    if both and not shared:
        raise TaskError(f"{source}: tasks.gate and tasks.evidence both name {both}: the gate would judge on tasks "
                        "the proposer learned from; set tasks.shared: true to allow it (rule: disjoint split)")
    if not gate:
        raise TaskError(f"{source}: no task is left for the gate to decide on (rule: a gate task)")
    neither = sorted(set(ids) - set(gate) - set(evidence))
    if neither:
        raise TaskError(f"{source}: tasks {neither} are in neither tasks.gate nor tasks.evidence; name each "
                        "task in one of them (rule: every task has a role)")
    return Split(tuple(sorted(evidence)), tuple(sorted(gate)), automatic)


def archive(task: Task, commit: str | None = None) -> bytes:
    """A git target's pinned commit (or `commit`) as tar bytes (`git archive`): the one way a git tree leaves its
    repository."""
    commit = commit or task.tree
    out = subprocess.run(["git", "-C", str(task.target_dir), "archive", "--format=tar", commit],
                         capture_output=True)
    if out.returncode != 0:
        raise TaskError(f"task {task.id}: cannot read its target tree {commit}: "
                        f"{out.stderr.decode(errors='replace').strip()[-300:]}")
    return out.stdout


def _tar_files(task: Task, data: bytes) -> Iterator[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            if member.isfile() and task.in_workspace(member.name):
                f = tar.extractfile(member)
                if f is not None:
                    yield member.name, f.read()


def tree_files(task: Task) -> Iterator[tuple[str, bytes]]:
    """The task's pinned tree as (path, bytes) as a workspace gets it: the git commit's files, or the plain
    directory's, without agent configuration (agent_config)."""
    if task.target_kind == "dir":
        yield from ((rel, data) for rel, data in dir_entries(task.target_dir) if task.in_workspace(rel))
        return
    yield from _tar_files(task, archive(task))


def solved_changes(task: Task) -> dict[str, bytes | None]:
    """What the task's solution changes in a workspace's tree: path -> the solved bytes, None for a file it deletes
    (a patch is applied with `git apply` to a scratch copy of the tree). Empty when the task has no solution."""
    sol = task.solution
    if sol is None:
        return {}
    before = dict(tree_files(task))
    if sol.kind == "ref":
        after = dict(_tar_files(task, archive(task, sol.commit)))
    else:
        after = _patched(task, before, sol.patch or b"")
    changes: dict[str, bytes | None] = {rel: data for rel, data in after.items() if before.get(rel) != data}
    changes.update({rel: None for rel in before if rel not in after})
    if not changes:
        raise TaskError(f"task {task.id}: solution: changes nothing in the workspace's tree (rule: a solution "
                        "changes the target)")
    return dict(sorted(changes.items()))


def _patched(task: Task, before: dict[str, bytes], patch: bytes) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory(prefix="skillevo-solution-") as tmp:
        root = Path(tmp) / "tree"
        for rel, data in before.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        root.mkdir(exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "GIT_CONFIG_NOSYSTEM": "1"}
        subprocess.run(["git", "init", "-q"], cwd=root, env=env, check=True, capture_output=True)
        done = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=root, env=env, input=patch,
                              capture_output=True)
        if done.returncode != 0:
            raise TaskError(f"task {task.id}: solution.patch does not apply to the target's tree: "
                            f"{'; '.join(done.stderr.decode(errors='replace').split(chr(10))).strip('; ')[-300:]} "
                            "(rule: the solution applies)")
        safefs.remove_tree(root / ".git")
        after = safefs.read_tree(root, max_file_bytes=MAX_TARGET_FILE, max_total_bytes=MAX_TARGET_TOTAL,
                                 what="solved file")
    return {rel: data for rel, data in after.items() if task.in_workspace(rel)}


def visible_texts(task: Task) -> Iterator[bytes]:
    """What the agent of a task can see: its prompt, setup and verify commands, its pinned target tree."""
    for text in (task.prompt, task.setup or "", task.verify):
        yield text.encode()
    for _, data in tree_files(task):
        yield data
