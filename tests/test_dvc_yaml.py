"""dvc.yaml reads as the table of contents: every stage's code dependencies are exactly what its script imports.

A dependency that is not imported re-runs a paid stage for nothing; an import that is not a dependency lets a
changed module reuse stale results. Both directions are checked against the real import graph (every
`import` statement, also those inside functions), plus the data files those modules load.
"""

from __future__ import annotations

import pytest
import yaml

from skillevo.bench.harness import PACKAGES, ROOT, closure


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
def test_every_stage_is_execd_so_it_is_dvcs_own_child(name):
    """Without `exec`, a shell that does not exec a lone command (dash) stays between DVC and the stage, and a
    stage whose `dvc` is killed runs on orphaned: PR_SET_PDEATHSIG only sees the shell."""
    stage = _stages()[name]
    assert stage.get("do", stage)["cmd"].startswith("exec python -m skillevo.stages."), f"{name}: cmd is not exec'd"


@pytest.mark.parametrize("name", sorted(_stages()))
def test_code_dependencies_are_exactly_the_import_closure(name):
    stage = _stages()[name]
    body = stage.get("do", stage)
    script = "skillevo/stages/" + body["cmd"].split("python -m skillevo.stages.", 1)[1].split()[0] + ".py"
    code_deps = set()
    for dep in body["deps"]:
        if dep.split("/")[0] in PACKAGES:
            code_deps |= _expand(dep)
    run = set().union(*(_expand(f) for f in closure(script)))  # a data directory (the schemas) as its files
    assert code_deps == run, (
        f"{name}: listed but not run: {sorted(code_deps - run)}; run but not listed: {sorted(run - code_deps)}")


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
        if dep.split("/")[0] not in PACKAGES and not dep.startswith("${item."):
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
