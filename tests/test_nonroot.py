"""The permission cases as they really happen: a harness run by a user (not root, which reads and removes
mode-000 files regardless) owns what its sandboxed agent wrote, and the kernel refuses that user a directory the
agent left without r-x. Here the cells run, through the real CLI and bwrap, in a child that has dropped to the
`nobody` uid: CI runs as root, so this is the only place the modes bite.

A checkout may sit where `nobody` cannot go (under /root, say): then the child sees it through a bind mount at a
directory of its own, in a mount namespace private to it (`unshare --mount`), so nothing else on the machine
sees the mount and it ends with the child; where `nobody` can reach it, no mount is made."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from skillevo.files import safefs

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
pytestmark = [pytest.mark.cli, pytest.mark.bwrap,
              pytest.mark.skipif(os.geteuid() != 0 or not (shutil.which("setpriv") and shutil.which("unshare")),
                                 reason="needs root (and util-linux's setpriv, unshare) to become another user")]
# in the private mount namespace: the checkout bound at $2, then the rest run as nobody
AS_NOBODY = f'mount --bind "$1" "$2" && shift 2 && exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups "$@"'
SCRIPT = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.test_measured_failures import _run
assert os.geteuid() != 0
results = _run(Path(sys.argv[2]), sys.argv[3:])  # asserts every cell directory was removed
print(json.dumps({name: result.row for name, result in results.items()}))
"""


def _seen_from(repo: Path, path: str) -> str:
    """`path` as the child sees it: through the bound checkout when it is inside it."""
    try:
        return str(repo / Path(path).relative_to(ROOT))
    except ValueError:
        return path


def _reachable_as_nobody() -> bool:
    """Whether `nobody` can run this venv's python and read the checkout as it is (no bind mount needed)."""
    probe = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "sh", "-c",
             'test -x "$1" && test -r "$2"', "sh", sys.executable, str(ROOT / "skillevo/__init__.py")]
    return subprocess.run(probe, capture_output=True).returncode == 0


def test_cells_an_agent_left_unreadable_are_measured_and_removed_by_a_harness_that_is_not_root():
    base = Path(tempfile.mkdtemp(prefix="skillevo-nonroot-"))  # pytest's tmp is private to root
    os.chown(base, NOBODY, NOBODY)
    repo = base / "repo"
    repo.mkdir(mode=0o755)
    direct = _reachable_as_nobody()
    seen = (lambda path: path) if direct else (lambda path: _seen_from(repo, path))
    env = {"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(base), "HOME": str(base),
           "SKILLEVO_CLAUDE": seen(os.environ["SKILLEVO_CLAUDE"])}
    cells = [seen(sys.executable), "-c", SCRIPT, seen(str(ROOT)), str(base / "run"), "honest", "locked",
             "reportlocked", "deeplocked", "readonly"]
    argv = (["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cells] if direct else
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", AS_NOBODY, "sh", str(ROOT), str(repo),
             *cells])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        rows = json.loads(done.stdout.splitlines()[-1])
    finally:
        repo.rmdir()  # any mount ended with the child's namespace; rmdir refuses a directory that is not empty
        safefs.remove_tree(base)
    honest = rows["honest"]
    assert honest["resolved"] is True and honest["error_kind"] is None, honest["error_detail"]
    for name in ("locked", "reportlocked", "deeplocked"):  # the kernel refused the harness: measured, paid
        row = rows[name]
        assert row["error_kind"] == "workspace-error" and "Permission denied" in row["error_detail"], (name, row)
        assert row["resolved"] is False and row["cost_usd"] >= honest["cost_usd"] > 0
    readonly = rows["readonly"]  # readable, only unwritable: measured like any other work, then removed
    assert readonly["resolved"] is True and readonly["diff_files"] == 3, readonly["error_detail"]
