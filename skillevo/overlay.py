"""Candidate overlays: validate untrusted replacement skill files, then freeze them by digest.

An overlay is a directory of `<skill>/<path>.md` files, each a complete replacement for the incumbent
file at `skills/<skill>/<path>.md`. Everything about it is untrusted (an agent wrote it), so every rule
fails closed with a message naming the file and the rule.
"""

from __future__ import annotations

import difflib
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from skillevo.digests import framed_digest, sha256_bytes

CANARY = "skillevo-oracle-canary"
MIN_ORACLE_LINE = 20


@dataclass(frozen=True)
class Limits:
    max_files: int = 16
    max_entries: int = 64
    max_path_bytes: int = 256
    max_file_bytes: int = 64 << 10
    max_total_bytes: int = 256 << 10
    max_changed_lines: int = 40

    @classmethod
    def from_params(cls, params: dict) -> "Limits":
        """params.yaml `propose.max_changed_lines`; the other limits are fixed."""
        return cls(max_changed_lines=int((params.get("propose") or {}).get("max_changed_lines", 40)))


class OverlayRefused(ValueError):
    """The overlay breaks a rule; the message names the file and the rule."""


def _refuse(path: str, rule: str) -> OverlayRefused:
    return OverlayRefused(f"overlay file {path}: {rule}")


def read_overlay(root: Path, limits: Limits) -> dict[str, bytes]:
    """Every file of the overlay as {`<skill>/<path>`: bytes}, refusing anything but plain files and dirs."""
    if root.is_symlink() or not root.is_dir() or Path(os.path.realpath(root)) != root.absolute():
        raise _refuse(str(root), "the overlay root must be a real directory reached without symlinks")
    files: dict[str, bytes] = {}
    entries = total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            entries += 1
            if entries > limits.max_entries:
                raise _refuse(rel, f"more than {limits.max_entries} entries (rule: entry count)")
            if len(rel.encode()) > limits.max_path_bytes:
                raise _refuse(rel, f"path longer than {limits.max_path_bytes} bytes (rule: path length)")
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                raise _refuse(rel, "is a symlink (rule: no symlinks)")
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise _refuse(rel, "is not a regular file (rule: no devices, fifos or sockets)")
            if name not in filenames:
                continue
            if st.st_size > limits.max_file_bytes:
                raise _refuse(rel, f"is {st.st_size} bytes, over {limits.max_file_bytes} (rule: file size)")
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                data = f.read(limits.max_file_bytes + 1)
            total += len(data)
            if total > limits.max_total_bytes:
                raise _refuse(rel, f"overlay exceeds {limits.max_total_bytes} bytes in all (rule: total size)")
            files[rel] = data
            if len(files) > limits.max_files:
                raise _refuse(rel, f"more than {limits.max_files} files (rule: file count)")
    if not files:
        raise _refuse(str(root), "the overlay is empty (rule: not empty)")
    return files


def changed_lines(old: bytes, new: bytes) -> int:
    """Lines that differ: a replaced block counts its longer side, an insertion or deletion its length."""
    a, b = old.decode(errors="replace").splitlines(), new.decode(errors="replace").splitlines()
    return sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
               if op != "equal")


def oracle_lines(oracle_files: list[bytes]) -> set[str]:
    return {line.strip() for data in oracle_files for line in data.decode(errors="replace").splitlines()
            if len(line.strip()) > MIN_ORACLE_LINE}


def validate(files: dict[str, bytes], skills_dir: Path, evolvable: set[str], oracle_files: list[bytes],
             limits: Limits) -> int:
    """Check every rule that needs the incumbents and the oracles; returns the changed-line count."""
    secrets = oracle_lines(oracle_files)
    changed = 0
    for rel, data in sorted(files.items()):
        parts = rel.split("/")
        if len(parts) < 2 or not rel.lower().endswith(".md"):
            raise _refuse(rel, "only <skill>/<path>.md files may be replaced (rule: Markdown under a skill)")
        if parts[0] not in evolvable:
            raise _refuse(rel, f"skill {parts[0]!r} is not evolvable (params skills.evolvable: {sorted(evolvable)})")
        incumbent = skills_dir / rel
        if incumbent.is_symlink() or not incumbent.is_file():
            raise _refuse(rel, f"has no incumbent {skills_dir.name}/{rel} to replace (rule: replacements only)")
        text = data.decode("utf-8", errors="strict") if _is_utf8(data) else None
        if text is None:
            raise _refuse(rel, "is not UTF-8 text (rule: Markdown)")
        if CANARY in text or any(line.strip() in secrets for line in text.splitlines()):
            raise _refuse(rel, "carries hidden-oracle content (rule: no oracle canary or oracle line)")
        changed += changed_lines(incumbent.read_bytes(), data)
    if changed == 0:
        raise _refuse("*", "every file is byte-identical to the incumbent (rule: a change is required)")
    if changed > limits.max_changed_lines:
        raise _refuse("*", f"{changed} changed lines, over the edit budget of {limits.max_changed_lines} "
                           "(rule: propose.max_changed_lines)")
    return changed


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def digest(files: dict[str, bytes]) -> str:
    """skillevo.digests.framed_digest over (`<skill>/<path>`, bytes): the bench computes the same."""
    return framed_digest(files.items())


def destinations(files: dict[str, bytes], skills_dir: str, mirrors: list[str]) -> list[str]:
    """Every repo path an apply would rewrite: the canonical file and its copy in each mirror."""
    return sorted(f"{base.rstrip('/')}/{rel}" for rel in files for base in [skills_dir, *mirrors])


def committed_digests(repo: Path, paths: list[str]) -> dict[str, str]:
    """sha256 of each path's committed bytes at HEAD, which must equal the working tree's."""
    out = {}
    for path in paths:
        shown = subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{path}"], capture_output=True)
        if shown.returncode != 0:
            raise _refuse(path, "has no committed base at HEAD (rule: apply replaces committed files only)")
        live = repo / path
        if live.is_symlink() or not live.is_file():
            raise _refuse(path, "is missing or a symlink in the working tree (rule: destinations are regular files)")
        if live.read_bytes() != shown.stdout:
            raise _refuse(path, "differs from its committed bytes; commit or restore it first (rule: no drift)")
        out[path] = sha256_bytes(shown.stdout)
    return out


def remove_frozen(path: Path) -> None:
    """Remove a frozen copy (its directories are read-only, which stops a non-root rmtree)."""
    if not path.exists():
        return
    for dirpath, _, _ in os.walk(path):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(path)


def freeze(files: dict[str, bytes], dest: Path) -> str:
    """Write the overlay read-only at `dest` (which must not exist) and return its re-read digest."""
    if dest.exists():
        raise FileExistsError(f"{dest} already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".freeze-", dir=dest.parent))
    try:
        for rel, data in sorted(files.items()):
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                os.fsync(f.fileno())
        for dirpath, _, _ in os.walk(tmp, topdown=False):
            os.chmod(dirpath, 0o555)
        os.rename(tmp, dest)
    except BaseException:
        remove_frozen(tmp)
        raise
    frozen = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    if frozen != files:
        raise RuntimeError(f"{dest}: the frozen copy differs from the validated overlay")
    return digest(frozen)
