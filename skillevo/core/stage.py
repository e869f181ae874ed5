"""The one way a stage script runs: parse argv, call the library, print a summary, map every failure to an exit code.

A user never sees a traceback for bad input or for a missing or broken environment: a SkillevoError, a full
disk, a permission problem or an interrupt becomes one line on stderr (`<stage>: <kind>: <message>`, the
message naming the file, the key or line, and the rule) and the exit code of its class (skillevo.files.errors). A
traceback is left only for what nobody anticipated: a bug, which should be reported.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

from skillevo.core import config
from skillevo.core.config import Params
from skillevo.core.declared import Declared, guard
from skillevo.files.errors import (
    BadInput,
    BrokenEnvironment,
    InternalError,
    Interrupted,
    SkillevoError,
    one_line,
)

Run = Callable[[argparse.Namespace], str | None]

PR_SET_PDEATHSIG = 1  # linux/prctl.h
_DISK = {errno.ENOSPC, errno.EDQUOT}
_DENIED = {errno.EACCES, errno.EPERM, errno.EROFS}


def _from_os_error(e: OSError) -> SkillevoError:
    where = e.filename if e.filename is not None else "a file"
    if e.errno in _DISK:
        return BrokenEnvironment(f"{where}: the disk is full ({e.strerror}); free space and run again")
    if e.errno in _DENIED:
        return BrokenEnvironment(f"{where}: {e.strerror} (rule: the stage must be able to read its inputs and "
                                 "write its outputs)")
    if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP):
        return BadInput(f"{where}: {e.strerror}")
    return BrokenEnvironment(f"{where}: {e.strerror or e}")


def family_options(parser: argparse.ArgumentParser, *, mirrors: bool = True) -> None:
    """What dvc.yaml passes from params `skills.paths`: --skills DIR, and --mirrors DIR... where a stage writes or
    binds destinations (those must then be repo-relative, as params requires); default: that section."""
    parser.add_argument("--skills", default=None, help="the canonical skill family [params skills.paths.skills]")
    if mirrors:
        parser.add_argument("--mirrors", nargs="*", default=None,
                            help="byte copies of the family that apply keeps in step [params skills.paths.mirrors]")


def load_params(name: str, args: argparse.Namespace, declared: Declared | None = None) -> Params:
    """params from --params (with --skills/--mirrors in place of `skills.paths` where a stage has --mirrors); its
    warnings printed. With `declared` (a pipeline stage's PARAMS), only those keys can be read (core.declared)."""
    family = {"skills": args.skills, "mirrors": args.mirrors} if hasattr(args, "mirrors") else {}
    params = config.load(args.params, **family)
    warn(name, params.notes)
    return params if declared is None else guard(params, declared, name)


def repo_dir(args: argparse.Namespace, params: Params) -> Path:
    """The git repository the family's paths are relative to: --repo, else params skills.root."""
    return Path(args.repo) if getattr(args, "repo", None) is not None else Path(params.skills.root)


def skills_dir(args: argparse.Namespace, params: Params) -> Path:
    """Where a stage reads the family from: --skills (as given), else params skills.paths.skills below skills.root."""
    return Path(args.skills) if args.skills else Path(params.skills.root) / params.skills.skills


def report(name: str, error: SkillevoError) -> int:
    print(f"{name}: {error.label}: {one_line(str(error))}", file=sys.stderr, flush=True)
    return error.exit_code


def warn(name: str, notes: Iterable[str]) -> None:
    for note in notes:
        print(f"{name}: warning: {one_line(note)}", file=sys.stderr, flush=True)


def die_with_parent() -> None:
    """SIGTERM this process when the one that started it dies (Linux prctl PR_SET_PDEATHSIG). A stage killed
    with its `dvc` must stop, not run on orphaned and later overwrite outputs DVC has restored meanwhile; SIGTERM
    stops it as Ctrl-C does, keeping what it finished."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the call
        os.kill(os.getpid(), signal.SIGTERM)


def main(name: str, parser: argparse.ArgumentParser, run: Run, argv: list[str] | None = None) -> int:
    """Parse `argv`, call `run(args)`, print the summary it returns; return the exit status. Run as a program
    (`argv` None), the stage dies with its parent."""
    args = parser.parse_args(argv)
    if argv is None:
        die_with_parent()
    try:
        summary = run(args)
    except SkillevoError as e:
        return report(name, e)
    except KeyboardInterrupt:
        return report(name, Interrupted("stopped by the user; finished work was kept"))
    except OSError as e:
        return report(name, _from_os_error(e))
    except MemoryError:
        return report(name, BrokenEnvironment("out of memory"))
    except Exception as e:  # noqa: BLE001 - one line, never a traceback the user must read; finished work is kept
        if os.environ.get("SKILLEVO_TRACEBACK"):
            traceback.print_exc()
        return report(name, InternalError(f"{type(e).__name__}: {str(e)[:300]} (a bug in skillevo: please report it; "
                                          "SKILLEVO_TRACEBACK=1 prints the traceback)"))
    if summary:
        print(summary, flush=True)
    return 0
