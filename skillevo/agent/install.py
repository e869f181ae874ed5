"""Install the pinned Claude Code CLI with npm, into a prefix of its own: the one installer, used by `make setup`
(the checkout's .tools/) and by `skillevo setup` (a user's data directory, for an installed package).

    skillevo setup [--prefix DIR]     (python -m skillevo setup)

The npm package's postinstall puts the native binary in place; the result is checked by asking it its version.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

from skillevo.core.pins import CLAUDE_CODE_PACKAGE, CLAUDE_CODE_VERSION
from skillevo.files.errors import BrokenEnvironment

BIN = Path("node_modules/.bin/claude")  # below a prefix
LOCK = ".skillevo-install.lock"  # in the prefix: one install into it at a time


def default_prefix() -> Path:
    """Where an installed skillevo keeps its pinned CLI: $XDG_DATA_HOME/skillevo (~/.local/share/skillevo)."""
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local/share")
    return Path(data) / "skillevo" / f"claude-code-{CLAUDE_CODE_VERSION}"


def installed_version(binary: Path) -> str:
    """The version the binary reports ("" when it cannot be run)."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                             env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "DISABLE_AUTOUPDATER": "1"})
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.split(" ", 1)[0].strip()


def install(prefix: Path) -> Path:
    """The pinned CLI's binary under `prefix`, installed unless it already is. Two installs into one prefix at once
    (two `make setup`s, parallel jobs) take turns: npm replaces node_modules/ whole, so one install's check could
    otherwise run while the other's npm had the binary removed."""
    binary = prefix / BIN
    if binary.exists() and installed_version(binary) == CLAUDE_CODE_VERSION:
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise BrokenEnvironment("npm is not installed (the pinned Claude Code CLI is an npm package): install "
                                "Node.js 18 or later, e.g. `sudo apt-get install -y nodejs npm`")
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or with the process
        if binary.exists() and installed_version(binary) == CLAUDE_CODE_VERSION:
            return binary  # the install we waited for
        return _npm_install(npm, prefix, binary)


def _npm_install(npm: str, prefix: Path, binary: Path) -> Path:
    done = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-fund", "--no-audit", "--loglevel=error",
                           f"{CLAUDE_CODE_PACKAGE}@{CLAUDE_CODE_VERSION}"], capture_output=True, text=True)
    if done.returncode != 0:
        raise BrokenEnvironment(f"npm could not install {CLAUDE_CODE_PACKAGE}@{CLAUDE_CODE_VERSION} into {prefix}: "
                                f"{done.stderr.strip()[-2000:]}")
    version = installed_version(binary)
    if version != CLAUDE_CODE_VERSION:
        raise BrokenEnvironment(f"{binary}: reports version {version or 'none'}, not the pinned "
                                f"{CLAUDE_CODE_VERSION}")
    return binary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="skillevo setup", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prefix", type=Path, default=None, help=f"install directory [{default_prefix()}]")
    args = p.parse_args(argv)
    try:
        binary = install(args.prefix or default_prefix())
    except BrokenEnvironment as e:
        print(f"setup: {e}", file=sys.stderr)
        return 69
    print(f"Claude Code {CLAUDE_CODE_VERSION}: {binary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
