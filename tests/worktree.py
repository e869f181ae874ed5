"""The checkout under test as a repository of its own: pipeline tests run `make` in it, so it must hold the working
tree (an uncommitted change included), not the last commit."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.bench_fixtures import ROOT

# Files of this checkout a fresh clone never has: the demo's lock here is this checkout's own record.
LOCAL_ONLY = frozenset({"dvc.lock"})


def clone_of_worktree(dest: Path, root: Path = ROOT) -> Path:
    """A clone of HEAD brought to the working tree (changed, added and removed files), committed so the pipeline
    sees a clean tree, as a user's checkout would be."""
    subprocess.run(["git", "clone", "-q", str(root), str(dest)], check=True)
    listing = subprocess.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True).stdout.decode()
    present = {rel for rel in listing.split("\0") if rel and rel not in LOCAL_ONLY and os.path.lexists(root / rel)}
    cloned = subprocess.run(["git", "ls-files", "-z"], cwd=dest, capture_output=True, check=True).stdout.decode()
    for rel in {r for r in cloned.split("\0") if r} - present:
        (dest / rel).unlink()
    for rel in present:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        if (dest / rel).is_symlink() or (dest / rel).exists():
            (dest / rel).unlink()
        shutil.copy2(root / rel, dest / rel, follow_symlinks=False)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    if subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=dest).returncode:
        subprocess.run([*git, "commit", "-qm", "the working tree under test"], cwd=dest, check=True)
    return dest
