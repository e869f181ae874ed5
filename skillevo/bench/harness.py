"""What the harness is: the code a stage runs and the outside tools a cell's outcome depends on.

Two owners rely on this one account. Each stage's identity (the package version and a digest of the stage
script's import closure, written by the `identity` stage for dvc.yaml) makes DVC re-run a stage exactly when the
code it runs changed, wherever skillevo is installed; and the cell store keys every cell on a digest of the
bench's closure and tool versions, so that a cell measured by an older (perhaps weaker) harness is never served
after the harness changes.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from skillevo.files.digests import framed_digest, sha256_json

ROOT = Path(__file__).resolve().parents[2]  # the checkout, or site-packages: paths below are the same in both
PACKAGES = ("skillevo",)
STAGES = "skillevo/stages"  # the package's path: in a checkout, a link to the top-level stages/
BENCH_SCRIPT = f"{STAGES}/bench.py"
SIMULATOR = "skillevo/simulator/"  # the offline model: a backend, not the engine (engine_digest)
# Files a module reads at run time besides its imports.
DATA = {
    "skillevo/files/schemas.py": {"skillevo/schemas"},  # every schema is in the registry (schemas refer to each other)
    "skillevo/sandbox/bwrap.py": {"skillevo/sandbox/launch.sh"},
    "skillevo/propose/prompt.py": {"skillevo/prompts/propose.md"},
    "skillevo/bench/scoring.py": {"skillevo/bench/pyboot/sitecustomize.py", "skillevo/bench/pyboot/pytest.ini"},
}
# What runs inside or around every cell besides our code: the sandbox, the relay, the checks' interpreter and test
# runner, and the workspace's git. Each is asked for its own version (first line of output).
TOOLS = {
    "bwrap": ["bwrap", "--version"],
    "socat": ["socat", "-V"],
    "git": ["git", "--version"],
    "python3": ["/usr/bin/python3", "--version"],
    "pytest": ["/usr/bin/python3", "-m", "pytest", "--version"],
}


def package_modules() -> list[Path]:
    """Every module file of the package, the linked stages/ among them (pathlib's rglob follows no link)."""
    found = []
    for top, dirs, files in os.walk(ROOT / PACKAGES[0], followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found += [Path(top) / f for f in sorted(files) if f.endswith(".py")]
    return found


def module_file(name: str) -> Path | None:
    """The file of module `name` (a module, or a package's __init__.py); None for a name defined inside one."""
    path = ROOT.joinpath(*name.split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def imports(path: Path) -> set[str]:
    """The skillevo and stages names `path` imports, wherever the import is (also inside a function). The one
    reading of imports: the stages' closures, the harness digest and tests/test_layout.py all use it."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    if path.name == "__init__.py":
        package = package.removesuffix(".__init__")
    else:
        package = package.rpartition(".")[0]
    return _imports(path.read_text(encoding="utf-8"), package)


# a line that starts an import statement, with a parenthesised name list whole (what else an import can span, a
# backslash continuation, fails to parse alone and sends the module to the full parse)
_IMPORT = re.compile(r"^[ \t]*(from[ \t]+\.*[\w.]*[ \t]+import[ \t]*(?:\([^)]*\)|[^\n]*)|import[ \t]+[^\n]*)", re.M)
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")  # where statements nest: imports are statements


def _statements(text: str) -> list[ast.stmt]:
    """Every import statement of a module: each line that starts one, parsed alone (ten times faster than parsing
    the module, which the identity stage would do for some 120 modules on every repro); the whole module, walked
    through its statement bodies, if any such line does not parse alone. A docstring line that reads like an
    import can only add a name, never hide one."""
    found: list[ast.stmt] = []
    for match in _IMPORT.finditer(text):
        try:
            found += ast.parse(match.group(1).strip()).body
        except SyntaxError:
            break
    else:
        return found
    found, todo = [], list(ast.parse(text).body)
    while todo:
        node = todo.pop()
        found.append(node)
        for field in _BODIES:
            todo.extend(getattr(node, field, ()))
    return found


@functools.lru_cache(maxsize=4096)
def _imports(text: str, package: str) -> set[str]:
    """By content, so a module is read once however many closures hold it."""
    names: set[str] = set()
    for node in _statements(text):
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
    """Repo-relative files a stage script runs: its modules (every `import`, also those inside functions), their
    packages' __init__.py, and the data files they load."""
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
        for name in imports(path):
            found = module_file(name)
            if found is not None:
                todo.append(found)
    files = {p.relative_to(ROOT).as_posix() for p in seen}
    return files | {d for f in files for d in DATA.get(f, ())}


def _files(rels: set[str]) -> list[tuple[str, bytes]]:
    out = []
    for rel in sorted(rels):
        path = ROOT / rel
        paths = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts) if path.is_dir() \
            else [path]
        out += [(p.relative_to(ROOT).as_posix(), p.read_bytes()) for p in paths]
    return out


def _version(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable: {type(e).__name__}"
    text = (done.stdout or done.stderr).decode(errors="replace").strip().splitlines()
    return text[0] if text else f"exit {done.returncode}"


@functools.cache
def tool_versions() -> dict[str, str]:
    return {name: _version(argv) for name, argv in TOOLS.items()}


@functools.cache
def code_digest(script: str = BENCH_SCRIPT) -> str:
    return framed_digest(_files(closure(script)))


def _simulator(rel: str) -> bool:
    return rel.startswith(SIMULATOR)


@functools.cache
def engine_digest() -> str:
    """The bench's code without the simulator's: what a cell on any backend runs. A real model's cell never runs
    simulator code, so an edit there must not make its stored cells unservable (paid again)."""
    return framed_digest(_files({rel for rel in closure(BENCH_SCRIPT) if not _simulator(rel)}))


@functools.cache
def simulator_digest() -> str:
    """The simulator's code in the bench's closure: in the key of simulated cells only (skillevo.bench.side)."""
    return framed_digest(_files({rel for rel in closure(BENCH_SCRIPT) if _simulator(rel)}))


def identity() -> dict[str, str]:
    """The bench harness as the cell store keys it: its engine's digest and the tools' versions."""
    return {"code": engine_digest(), **tool_versions()}


def digest() -> str:
    return sha256_json(identity())


def package_version() -> str:
    try:
        return version("skillevo")
    except PackageNotFoundError:  # a checkout run without an install
        return "unknown"


def stage_names() -> list[str]:
    """The pipeline's stage scripts (skillevo/stages/<name>.py), the identity stage itself excluded."""
    return sorted(p.stem for p in (ROOT / STAGES).glob("*.py") if p.stem not in ("__init__", "identity"))


def stage_identity(name: str) -> dict[str, str | int]:
    """What a stage's results depend on of skillevo itself: the version and the digest of the code it runs."""
    files = _files(closure(f"{STAGES}/{name}.py"))
    return {"stage": name, "skillevo": package_version(), "code": framed_digest(files), "files": len(files)}
