"""What an apply or a revert did, told to the person who ran it: the files, the diff, and what to do next.

Apply leaves an ordinary working-tree diff and never commits or pushes, so its summary ends with how to
review the change and commit it yourself; a revert's, with what is left to do: nothing, unless the apply was
committed.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Outcome:
    """What an apply or revert did, and the summary the stage prints."""

    action: str  # applied | reverted
    files: list[dict[str, Any]]  # before_sha256 None: created; after_sha256 None: deleted
    swap: str
    record: Path  # the receipt (applied) or the reverted record
    diff_stat: str
    inputs: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.action == "reverted":
            return self._reverted()
        lines = [*self.inputs, f"apply: {self.action} {len(self.files)} file(s) (swap: {self.swap}):"]
        lines += [f"  {f['path']}  {_short(f['before_sha256'], 'new')} -> {_short(f['after_sha256'], 'deleted')}"
                  for f in self.files]
        lines += [f"{'receipt' if self.action == 'applied' else 'revert record'}: {self.record}", "git diff --stat:"]
        lines += ["  " + line for line in self.diff_stat.splitlines()]
        created = [f["path"] for f in self.files if f["before_sha256"] is None]
        deleted = [f["path"] for f in self.files if f["after_sha256"] is None]
        if created:  # untracked: git diff does not show them
            lines += [f"  new, untracked (git status shows them, git diff does not): {' '.join(created)}"]
        remaining = " ".join(f["path"] for f in self.files if f["after_sha256"] is not None)
        lines += [
            "next steps:",
            "  1. review the change: " + "; ".join(([f"git diff -- {remaining}"] if remaining else ["git status"]) +
                                                  ([f"read the new files: {' '.join(created)}"] if created else [])),
            "  2. run your checks (make test, your own evaluation)",
            f"  3. commit it yourself when satisfied: git add -- {remaining} && git commit" if remaining else
            "  3. commit it yourself when satisfied",
        ]
        if deleted:
            lines += [f"     deleted: {' '.join(deleted)} (if the apply was committed, stage that too: git rm "
                      f"--cached --ignore-unmatch -- {' '.join(deleted)})"]
        undo = "  To undo this apply: skillevo revert (make revert)" if self.action == "applied" else ""
        lines += ["apply never commits or pushes." + undo]
        return "\n".join(lines)

    def _reverted(self) -> str:
        lines = [f"revert: restored {len(self.files)} file(s) to their bytes before the apply (swap: {self.swap}):"]
        lines += [f"  {f['path']}  {_short(f['before_sha256'], 'new')} -> {_short(f['after_sha256'], 'deleted')}"
                  for f in self.files]
        lines += [f"revert record: {self.record}", "git diff --stat:"]
        lines += ["  " + line for line in self.diff_stat.splitlines()]
        lines += ["nothing to review: the skills are as they were before the apply. If the apply was committed, the "
                  "diff above undoes that commit: commit it, or `git revert` the apply's commit instead."]
        return "\n".join(lines)


def _short(digest: str | None, absent: str) -> str:
    return f"({absent})" if digest is None else digest[:12]


def diff_stat(repo: Path, paths: list[str]) -> str:
    """`git diff --stat` of exactly these paths, without running repo-configured helpers; never fatal."""
    command = ["git", "-c", "core.fsmonitor=false", "-C", str(repo), "diff", "--no-ext-diff", "--no-textconv",
               "--stat", "--", *paths]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"(git diff unavailable: {e})"
    if result.returncode != 0:
        return "(not a git repository, or git failed; no diff shown)"
    return result.stdout.rstrip() or "(no difference from the index)"
