"""The layout shows the architecture: skillevo/ is layers, not a heap of modules, and the imports keep it so.

files is the base (file handling, documents, digests, schemas, the errors) and depends on nothing of skillevo; core
holds the domain rules every stage shares and depends on nothing but files and the statistics; the engine
(agent, sandbox, simulator, stats, bench), the stage libraries and the operator tools sit above it without a
cycle between packages, so each can be read, tested and changed apart; and no module grows past what one
reading holds. Imports are read by the harness's own rule (skillevo.bench.harness.imports), the one the stages'
dvc.yaml dependencies and the cell store's harness digest rest on.
"""

from __future__ import annotations

import os
from itertools import pairwise
from pathlib import Path

from skillevo.bench import harness
from skillevo.bench.harness import ROOT, imports, module_file

PACKAGE = ROOT / "skillevo"
NODES = {"files", "core", "backends", "agent", "sandbox", "simulator", "stats", "bench", "evidence", "gate", "apply",
         "ops", "propose", "freeze", "readiness", "stages", "commands", "__main__"}
MAX_LINES = 400


def _node(path: Path) -> str | None:
    """The package (or top-level module) a file belongs to; None for skillevo/__init__.py, which is every one's."""
    first = path.relative_to(PACKAGE).parts[0]
    return None if first == "__init__.py" else first.removesuffix(".py")


def _modules() -> list[Path]:
    return sorted(harness.package_modules())


def _graph() -> dict[str, dict[str, set[str]]]:
    """node -> the nodes it imports, each with the files that do."""
    graph: dict[str, dict[str, set[str]]] = {}
    for path in _modules():
        node = _node(path)
        if node is None:
            continue
        edges = graph.setdefault(node, {})
        for name in imports(path):
            found = module_file(name)
            if found is None or found.relative_to(ROOT).parts[0] != "skillevo":
                continue
            target = _node(found)
            if target is not None and target != node:
                edges.setdefault(target, set()).add(path.relative_to(ROOT).as_posix())
    return graph


def test_every_module_belongs_to_a_layer():
    """A new top-level module or package is a new place in the architecture: it is placed here on purpose."""
    assert set(_graph()) == NODES


def test_no_module_is_over_400_lines():
    long = {p.relative_to(ROOT).as_posix(): n for p in _modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split along a seam (over {MAX_LINES} lines): {long}"


def test_the_package_import_graph_has_no_cycle():
    graph = _graph()
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, {})):
            if state.get(target) == "open":
                cycle = path[path.index(target):] + [target]
                steps = [f"{a} -> {b} ({', '.join(sorted(graph[a][b]))})" for a, b in pairwise(cycle)]
                raise AssertionError("package import cycle:\n" + "\n".join(steps))
            if target not in state:
                visit(target)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_file_handling_base_imports_nothing_of_skillevo():
    """files/ (safe reads and writes, documents, digests, schemas, the errors that name a file and a rule) is what
    every layer stands on: it knows no task, arm, skill or decision."""
    assert not _graph().get("files"), f"files must not depend on any layer: {_graph()['files']}"


def test_core_imports_nothing_but_core_files_and_stats():
    outside = {target: files for target, files in _graph()["core"].items() if target not in ("files", "stats")}
    assert not outside, f"core must not depend on the layers above it: {outside}"


def test_nothing_imports_the_operator_tools():
    """ops runs around the pipeline; a stage or the engine that imported it would put a tool in a stage's
    dependencies and the harness digest."""
    users = {node: edges["ops"] for node, edges in _graph().items() if "ops" in edges}
    assert not users, users


def test_nothing_imports_the_entry_points():
    """The stage scripts and the `skillevo` command sit on top: a library module that imported one would make a
    stage's code (and the harness digest) depend on another stage's."""
    entry = {"stages", "commands", "__main__"}
    users = {node: sorted(set(edges) & entry) for node, edges in _graph().items()
             if set(edges) & entry and node not in ("commands", "__main__")}
    assert not users, users


def test_every_data_file_the_harness_digests_hangs_on_a_module_that_exists():
    """harness.DATA adds what a module reads at run time (the proposer's prompt, the schemas) to its stage's identity;
    a module renamed without its entry would leave a prompt edit out of every digest, silently (found when
    propose.py became a package: the prompt hung on a path no longer there)."""
    from skillevo.bench.harness import DATA

    for module, data in DATA.items():
        assert (ROOT / module).is_file(), f"harness.DATA names {module}, which does not exist"
        for path in data:
            assert (ROOT / path).exists(), f"harness.DATA: {module} reads {path}, which does not exist"


def test_stages_and_schemas_sit_at_the_top_and_the_package_reaches_them_through_links():
    """The design card's layout: stages/ and schemas/ at the top; skillevo/stages and skillevo/schemas are links
    to them, so the package (and a clone of it) imports the scripts of its own tree; the wheel carries copies
    (tests/test_package.py)."""
    for name in ("stages", "schemas"):
        assert (ROOT / name).is_dir() and not (ROOT / name).is_symlink(), name
        link = ROOT / "skillevo" / name
        assert link.is_symlink() and os.readlink(link) == f"../{name}", link
    stage_scripts = {p.stem for p in harness.package_modules() if p.parent == ROOT / "skillevo/stages"}
    assert {"bench", "gate", "identity", "__init__"} <= stage_scripts, stage_scripts
