"""dvc.yaml reads as the table of contents: every path a stage reads or writes is in its command, and the code it
runs reaches it through its identity file.

A code dependency that is not run re-runs a paid stage for nothing; code that is run but not a dependency lets a
changed module reuse stale results. A stage's identity is the digest of its script's real import graph (every
`import` statement, also those inside functions) plus the data files those modules load, so both directions hold
by construction; the tests below show an edit reaching exactly the stages that import it.
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from skillevo.bench import harness
from skillevo.bench.harness import PACKAGES, ROOT, stage_names


def _stages() -> dict[str, dict]:
    doc = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))
    return doc["stages"]


@pytest.mark.parametrize("name", sorted(_stages()))
def test_every_stage_is_execd_so_it_is_dvcs_own_child(name):
    """Without `exec`, a shell that does not exec a lone command (dash) stays between DVC and the stage, and a
    stage whose `dvc` is killed runs on orphaned: PR_SET_PDEATHSIG only sees the shell."""
    stage = _stages()[name]
    assert stage.get("do", stage)["cmd"].startswith("exec python -m skillevo.stages."), f"{name}: cmd is not exec'd"


@pytest.mark.parametrize("name", sorted(set(_stages()) - {"identity"}))
def test_a_stage_depends_on_its_code_through_its_identity_and_on_no_code_path(name):
    """The code a stage runs is in its identity file (which the identity stage writes, always run); a code path
    in deps would name a file of this checkout that an installed skillevo does not have."""
    body = _stages()[name].get("do", _stages()[name])
    script = body["cmd"].split("python -m skillevo.stages.", 1)[1].split()[0]
    assert body["deps"][0] == f"results/identity/{script}.json"
    assert not [d for d in body["deps"] if d.split("/")[0] in PACKAGES], name
    assert f"results/identity/{script}.json" in _identity_outs()


def _identity_outs() -> set[str]:
    return {next(iter(out)) if isinstance(out, dict) else out for out in _stages()["identity"]["outs"]}


def test_the_identity_stage_writes_one_file_per_stage_and_always_runs():
    stage = _stages()["identity"]
    assert stage["always_changed"] is True
    assert _identity_outs() == {f"results/identity/{name}.json" for name in stage_names()}
    assert all(out[next(iter(out))] == {"cache": False} for out in stage["outs"])  # rebuilt, never pulled


def test_a_stage_identity_follows_exactly_the_code_it_runs(tmp_path, monkeypatch):
    """An edit of a module changes the identity of the stages that import it, and of no other."""
    shutil.copytree(ROOT / "skillevo", tmp_path / "skillevo", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(harness, "ROOT", tmp_path)
    before = {name: harness.code_digest.__wrapped__(f"{harness.STAGES}/{name}.py") for name in stage_names()}
    policy = tmp_path / "skillevo/gate/policy.py"
    policy.write_text(policy.read_text() + "\n# an edit\n")
    after = {name: harness.code_digest.__wrapped__(f"{harness.STAGES}/{name}.py") for name in stage_names()}
    importers = {name for name in stage_names()
                 if "skillevo/gate/policy.py" in harness.closure(f"{harness.STAGES}/{name}.py")}
    assert importers and importers != set(stage_names())
    assert {name for name in before if before[name] != after[name]} == importers


def test_the_identity_stage_writes_what_the_harness_says(tmp_path):
    from skillevo.stages import identity
    assert identity.main(["--out", str(tmp_path)]) == 0
    for name in stage_names():
        written = json.loads((tmp_path / f"{name}.json").read_text())
        assert written == harness.stage_identity(name) and written["code"] == harness.code_digest(
            f"{harness.STAGES}/{name}.py")


def _covered(path: str, words: list[str]) -> bool:
    """`path` is named by the command: itself, a template that contains it (`${skills.paths}` names
    `${skills.paths.skills}`), or the directory of a file the command names or something inside it (the tasks
    file's oracles, targets and playbooks)."""
    root = "${skills.root}/"
    if path.startswith(root) and path not in words and "${skills.root}" in " ".join(words):
        path = path.removeprefix(root)  # the family below the repository's root, named as --repo and ${skills.paths}
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
    for dep in body.get("deps", []):
        if not dep.startswith(("${item.", "results/identity/")):  # the identity stands for the code: not read
            assert _covered(dep, words), f"{name}: reads {dep}, which its cmd does not name"
    for out in body.get("outs", []) + body.get("metrics", []) + body.get("plots", []):
        path = out if isinstance(out, str) else next(iter(out))
        assert _covered(path, words), f"{name}: writes {path}, which its cmd does not name"


def test_the_family_directories_are_templated_from_params():
    """skills.paths is in params.yaml once; dvc.yaml refers to it, never to a hard-coded skills directory."""
    family = {"skills", ".claude/skills"}
    for name, stage in _stages().items():
        body = stage.get("do", stage)
        for path in [*body.get("deps", []), *body["cmd"].split()]:
            assert path not in family and not any(path.startswith(f + "/") for f in family), f"{name}: {path}"


def test_the_identity_stage_loads_no_bench_and_the_bench_closure_still_holds_all_of_it():
    """Issue 31, item 7: the identity stage runs on every repro and once loaded the whole bench (skillevo.bench's
    __init__ imported every module) and parsed each module once per closure: 1.8-2.5 s. The package now loads its
    names on first use; a stage that uses the bench still digests all of it, through the import the lazy lookup
    makes (`make bench-pipeline` prints identity_s)."""
    import subprocess
    import sys

    code = ("import sys, skillevo.stages.identity\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('skillevo', 'numpy', 'scipy')))))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                cwd=ROOT).stdout.split())
    assert "skillevo.bench.harness" in loaded
    assert not loaded & {"skillevo.bench.api", "skillevo.bench.side", "skillevo.bench.cell", "skillevo.simulator",
                         "skillevo.stats", "numpy", "scipy"}, loaded
    bench = harness.closure("skillevo/stages/bench.py")
    assert {"skillevo/bench/side.py", "skillevo/bench/cell.py", "skillevo/sandbox/relay.py",
            "skillevo/bench/api.py"} <= bench


def test_a_module_read_by_its_import_lines_gives_what_a_full_parse_gives():
    """The closures read each module's import lines alone (ten times faster than parsing it); every module of the
    package gives the same names as a walk of its whole syntax tree, and a line that does not parse alone (a
    backslash continuation) falls back to that walk."""
    import ast

    def full(text: str, package: str) -> set[str]:
        names = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                names.add(base)
                names.update(f"{base}.{a.name}" for a in node.names)
        return {n for n in names if n.split(".")[0] in PACKAGES}

    for path in harness.package_modules():
        package = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        package = package.removesuffix(".__init__") if path.name == "__init__.py" else package.rpartition(".")[0]
        assert harness.imports(path) == full(path.read_text(), package), path
    tricky = ("def f():\n    from skillevo.core import \\\n        layout\n    import skillevo.files.safefs\n\n\n"
              "class C:\n    from skillevo.gate import (\n        policy,\n    )\n")
    assert harness._imports(tricky, "skillevo.x") == full(tricky, "skillevo.x") == {
        "skillevo.core", "skillevo.core.layout", "skillevo.files.safefs", "skillevo.gate", "skillevo.gate.policy"}
