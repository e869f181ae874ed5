"""A minimal tasks directory for bench tests that need tasks the demo does not have (a cheating agent)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from skillevo.core import config
from skillevo.stats import betting

ROOT = Path(__file__).resolve().parents[1]
CANARY = "skillevo-oracle-canary: 0f3a9c1e5b7d2468"

TASKS = {
    "schema_version": 1,
    "tasks": [
        {"id": "greet", "class": "trivial", "target": "targets/greet",
         "prompt": "make the friendlier greeting say hello; add tests in tests/test_greet.py",
         "verify": "python3 -m pytest -q -p no:cacheprovider tests/test_greet.py",
         "oracle": {"command": 'python3 -m pytest -q -p no:cacheprovider --rootdir="$SKILLEVO_ORACLE_DIR" '
                               '"$SKILLEVO_ORACLE_DIR/test_greet_oracle.py"',
                    "files": [{"source": "test_greet_oracle.py", "target": "test_greet_oracle.py"}]}},
        {"id": "cheat", "class": "investigation", "target": "targets/greet",
         "prompt": "make the cheating greeting say hello; add tests in tests/test_greet.py",
         "verify": "python3 -m pytest -q -p no:cacheprovider tests/test_greet.py",
         "oracle": {"command": 'python3 -m pytest -q -p no:cacheprovider --rootdir="$SKILLEVO_ORACLE_DIR" '
                               '"$SKILLEVO_ORACLE_DIR/test_greet_oracle.py"',
                    "files": [{"source": "test_greet_oracle.py", "target": "test_greet_oracle.py"}]}},
    ],
}

PLAYBOOK = {
    "schema_version": 1,
    "unskilled": "work",
    "instructions": [{"id": "survey", "phrase": "read every module of the package end to end before editing"}],
    "tasks": [
        {"id": "greet", "match": "friendlier greeting", "sessions": {
            "plan": [{"read": "pkg/greet.py"}, {"write": {"path": "docs/plan.md", "content": "say hello\n"}}],
            "work": [{"read": "pkg/greet.py"},
                     {"edit": {"path": "pkg/greet.py", "old": '"hi"', "new": '"hello"'}},
                     {"write": {"path": "tests/test_greet.py",
                                "content": "from pkg.greet import greet\n\n\n"
                                           "def test_greet():\n    assert greet() == 'hello'\n"}},
                     {"bash": "python3 -m pytest -q -p no:cacheprovider tests/test_greet.py"}]}},
        # an agent that makes the visible check pass without doing the work
        {"id": "cheat", "match": "cheating greeting", "sessions": {
            "plan": [{"write": {"path": "docs/plan.md", "content": "skip it\n"}}],
            "work": [{"write": {"path": "tests/test_greet.py", "content": "def test_greet():\n    assert True\n"}},
                     {"bash": "python3 -m pytest -q -p no:cacheprovider tests/test_greet.py"}]}},
    ],
}


def make_mini(root: Path) -> Path:
    """tasks/ (tasks.yaml, targets/greet, oracles/, playbooks/) under root; returns the tasks file."""
    tasks = root / "tasks"
    (tasks / "targets/greet/pkg").mkdir(parents=True)
    (tasks / "targets/greet/pkg/__init__.py").write_text("")
    (tasks / "targets/greet/pkg/greet.py").write_text('def greet():\n    return "hi"\n')
    (tasks / "oracles").mkdir()
    (tasks / "oracles/test_greet_oracle.py").write_text(
        f"# {CANARY}\nfrom pkg.greet import greet\n\n\ndef test_greet_says_hello():\n    assert greet() == 'hello'\n")
    (tasks / "playbooks").mkdir()
    (tasks / "playbooks/mini.yaml").write_text(yaml.safe_dump(PLAYBOOK))
    (tasks / "tasks.yaml").write_text(yaml.safe_dump(TASKS))
    return tasks / "tasks.yaml"


def params_doc(runs: int = 1, workers: int = 2, **sections: dict) -> dict:
    """The project's params.yaml as a document, with runs (both sides'), workers and whole sections changed."""
    doc = yaml.safe_load((ROOT / "params.yaml").read_text())
    doc["bench"].update(workers=workers)
    doc.setdefault("sampling", {}).update(runs=runs, incumbent_runs=runs)
    doc["tasks"].update(gate=[], evidence=[])  # the demo's split names demo tasks; tests bring their own tasks
    for name, values in sections.items():
        doc[name] = {**doc.get(name, {}), **values}
    return doc


def params(runs: int = 1, workers: int = 2, **sections: dict) -> config.Params:
    return config.parse(params_doc(runs, workers, **sections))


def write_params(path: Path, **kw) -> Path:
    path.write_text(yaml.safe_dump(params_doc(**kw)))
    return path


def copy_skills(dest: Path) -> Path:
    shutil.copytree(ROOT / "skills", dest)
    return dest


def capped(side, cap: float):
    """The side with every arm capped at `cap` dollars per run, as a candidate side's design caps it."""
    task = side.tasks[0].id
    side.designs = {a.incumbent: betting.Design({task: betting.TaskDesign(cap / 2, 1.0, 0.0, cap)}, 0.2)
                    for a in side.arms}
    return side

