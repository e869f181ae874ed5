"""dvc.yaml reads as the table of contents: every stage's code dependencies are exactly what its script imports.

A dependency that is not imported re-runs a paid stage for nothing; an import that is not a dependency lets a
changed module reuse stale results. Both directions are checked against the real import graph (every
`import` statement, also those inside functions), plus the data files those modules load.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("skillevo", "stages")
# Files a module reads at run time besides its imports.
DATA = {
    "skillevo/schemas.py": {"schemas"},  # every schema is in the registry (schemas refer to each other)
    "skillevo/sandbox/__init__.py": {"skillevo/sandbox/launch.sh"},
    "skillevo/bench/checks.py": {"skillevo/bench/pyboot/sitecustomize.py", "skillevo/bench/pyboot/pytest.ini"},
}


def _module_file(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def _imports(path: Path) -> set[str]:
    names = set()
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    if path.name == "__init__.py":
        package = package.removesuffix(".__init__")
    else:
        package = package.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return {n for n in names if n.split(".")[0] in PACKAGES}


def closure(script: str) -> set[str]:
    """Repo-relative files a stage script runs: its modules, their packages' __init__.py, the data they load."""
    todo, seen = [ROOT / script], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        rel = path.relative_to(ROOT)
        for parent in rel.parents:
            init = ROOT / parent / "__init__.py"
            if parent != Path(".") and init.is_file() and init not in seen:
                todo.append(init)
        for name in _imports(path):
            found = _module_file(name)
            if found is not None:
                todo.append(found)
    files = {p.relative_to(ROOT).as_posix() for p in seen}
    return files | {d for f in files for d in DATA.get(f, ())}


def _expand(dep: str) -> set[str]:
    """A dependency as the files it stands for (a package directory: every file in it but bytecode)."""
    path = ROOT / dep
    if path.is_dir() and dep.split("/")[0] in PACKAGES:
        return {p.relative_to(ROOT).as_posix() for p in path.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    return {dep}


def _stages() -> dict[str, dict]:
    doc = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))
    return doc["stages"]


@pytest.mark.parametrize("name", sorted(_stages()))
def test_code_dependencies_are_exactly_the_import_closure(name):
    stage = _stages()[name]
    body = stage.get("do", stage)
    script = "stages/" + body["cmd"].split("python -m stages.", 1)[1].split()[0] + ".py"
    code_deps = set()
    for dep in body["deps"]:
        if dep.split("/")[0] in PACKAGES or dep == "schemas":
            code_deps |= _expand(dep)
    assert code_deps == closure(script), (
        f"{name}: listed but not run: {sorted(code_deps - closure(script))}; "
        f"run but not listed: {sorted(closure(script) - code_deps)}")


def _covered(path: str, words: list[str]) -> bool:
    """`path` is named by the command: itself, a template that contains it (`${skills.paths}` names
    `${skills.paths.skills}`), or the directory of a file the command names or something inside it (the tasks
    file's oracles, targets and playbooks)."""
    for word in words:
        parent = word.rsplit("/", 1)[0] if "/" in word else None
        if path == word or path.startswith(word.rstrip("}") + ".") or path.startswith(word.rstrip("/") + "/"):
            return True
        if parent and (path == parent or path.startswith(parent + "/")):
            return True
    return False


@pytest.mark.parametrize("name", sorted(_stages()))
def test_every_path_the_stage_reads_or_writes_is_in_its_command(name):
    stage = _stages()[name]
    body = stage.get("do", stage)
    words = body["cmd"].split()
    for dep in body["deps"]:
        if dep.split("/")[0] not in (*PACKAGES, "schemas") and not dep.startswith("${item."):
            assert _covered(dep, words), f"{name}: reads {dep}, which its cmd does not name"
    for out in body.get("outs", []) + body.get("metrics", []) + body.get("plots", []):
        path = out if isinstance(out, str) else next(iter(out))
        assert _covered(path, words), f"{name}: writes {path}, which its cmd does not name"


def test_the_family_directories_are_templated_from_params():
    """skills.paths is in params.yaml once; dvc.yaml refers to it, never to a hard-coded skills directory."""
    family = {"skills", ".claude/skills"}
    for name, stage in _stages().items():
        body = stage.get("do", stage)
        for path in [*body["deps"], *body["cmd"].split()]:
            assert path not in family and not any(path.startswith(f + "/") for f in family), f"{name}: {path}"
