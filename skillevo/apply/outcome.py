"""What an apply or a revert did, told to the person who ran it: the files, the diff, and what to do next.

Apply leaves an ordinary working-tree diff and never commits or pushes, so its summary ends with how to
review the change and commit it yourself.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Outcome:
    """What an apply or revert did, and the summary the stage prints."""

    action: str  # applied | reverted
    files: list[dict[str, str]]
    swap: str
    record: Path  # the receipt (applied) or the reverted record
    diff_stat: str
    inputs: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [*self.inputs, f"apply: {self.action} {len(self.files)} file(s) (swap: {self.swap}):"]
        lines += [f"  {f['path']}  {f['before_sha256'][:12]} -> {f['after_sha256'][:12]}" for f in self.files]
        lines += [f"{'receipt' if self.action == 'applied' else 'revert record'}: {self.record}", "git diff --stat:"]
        lines += ["  " + line for line in self.diff_stat.splitlines()]
        paths = " ".join(f["path"] for f in self.files)
        lines += [
            "next steps:",
            f"  1. review the change: git diff -- {paths}",
            "  2. run your checks (make test, your own evaluation)",
            f"  3. commit it yourself when satisfied: git add -- {paths} && git commit",
            "apply never commits or pushes." + ("  To undo this apply: make revert" if self.action == "applied"
                                                else ""),
        ]
        return "\n".join(lines)


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
