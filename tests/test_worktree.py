"""The pipeline tests' copy of the checkout holds the working tree: a change not yet committed is what they test."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.worktree import clone_of_worktree

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def _repo(root: Path) -> Path:
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    for rel, text in {"kept.txt": "old\n", "gone.txt": "x\n", "pkg/mod.py": "A = 1\n", ".gitignore": "/ignored\n"
                      }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    subprocess.run([*GIT, "add", "-A"], cwd=root, check=True)
    subprocess.run([*GIT, "commit", "-qm", "base"], cwd=root, check=True)
    return root


def test_changed_added_and_removed_files_reach_the_copy_and_it_is_clean(tmp_path):
    root = _repo(tmp_path / "root")
    (root / "kept.txt").write_text("new\n")  # changed, not staged
    (root / "gone.txt").unlink()  # removed, not staged
    (root / "pkg/new.py").write_text("B = 2\n")  # untracked
    (root / "pkg/new.py").chmod(0o755)
    (root / "link").symlink_to("kept.txt")
    (root / "ignored").write_text("local\n")
    (root / "dvc.lock").write_text("this checkout's record\n")
    copy = clone_of_worktree(tmp_path / "copy", root)
    assert (copy / "kept.txt").read_text() == "new\n"
    assert not (copy / "gone.txt").exists()
    assert (copy / "pkg/new.py").read_text() == "B = 2\n" and (copy / "pkg/new.py").stat().st_mode & 0o111
    assert (copy / "link").is_symlink() and str((copy / "link").readlink()) == "kept.txt"
    assert not (copy / "ignored").exists() and not (copy / "dvc.lock").exists()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=copy, capture_output=True, text=True, check=True)
    assert status.stdout == ""  # the pipeline refuses uncommitted skills: the copy is committed
    assert (root / "kept.txt").read_text() == "new\n" and (root / "ignored").exists()  # the source is untouched


def test_a_clean_checkout_is_copied_as_its_head(tmp_path):
    root = _repo(tmp_path / "root")
    copy = clone_of_worktree(tmp_path / "copy", root)
    heads = [subprocess.run(["git", "rev-parse", "HEAD"], cwd=d, capture_output=True, text=True).stdout
             for d in (root, copy)]
    assert heads[0] == heads[1]
