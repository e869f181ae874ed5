"""Run a host process that starts one sandbox, kill -9 the host at a chosen moment, and report which of its
processes outlived it. Run as a program by tests/test_lifeline.py:

    python -m tests.orphans MODE ROOT      (MODE: setup | running | guardless)

This process makes itself a child subreaper, so whatever the host leaves orphaned is reparented here and found
among this process's own descendants: nothing else on the machine is looked at. Prints one JSON line.

`setup` holds bwrap inside its sandbox setup (a `--file` read from a pipe this process keeps open) while the host
is killed: the window before bwrap's own --die-with-parent takes hold. `running` kills the host while the command
runs; `guardless` does the same after the command has killed every other process it can see (the lifeline's
guard included), as a hostile agent would.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
COMMANDS = {
    "setup": "touch /work/ran; (setsid sleep 300 &); sleep 300",
    "running": "touch /work/ran; (setsid sleep 300 &); sleep 300",
    # stop, then kill, every process but init, the launcher and this shell: the lifeline's guard is gone
    "guardless": "others() { for p in /proc/[0-9]*; do p=${p#/proc/}; "
                 "[ $p = 1 ] || [ $p = $$ ] || [ $p = $PPID ] || echo $p; done; }; "
                 "kill -STOP $(others); kill -KILL $(others); "
                 "touch /work/ran; (setsid sleep 300 &); sleep 300",
}
HOST = r'''
import os, sys
from pathlib import Path
from skillevo import sandbox
from skillevo.sandbox import process
root, slow, command = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if slow >= 0:
    build, run = sandbox.command, process.run
    def held(spec, argv, **kw):
        args = build(spec, argv, **kw)
        at = args.index("bwrap") + 1
        return args[:at] + ["--file", str(slow), "/tmp/held"] + args[at:]
    sandbox.command = held
    process.run = lambda argv, **kw: run(argv, **{**kw, "pass_fds": (*kw["pass_fds"], slow)})
ws = root / "ws"
ws.mkdir(exist_ok=True)
sandbox.run(sandbox.SandboxSpec(workspace=ws, private=root / "private", env=sandbox.base_env()),
            ["/bin/sh", "-c", command], timeout_s=600)
'''


def descendants() -> list[tuple[int, str, str]]:
    """(pid, name, state) of every live (not zombie) process below this one."""
    children: dict[int, list[tuple[int, str, str]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        state, ppid = rest.split()[:2]
        children.setdefault(int(ppid), []).append((int(entry), name, state))
    found, todo = [], [os.getpid()]
    while todo:
        for proc in children.get(todo.pop(), []):
            found.append(proc)
            todo.append(proc[0])
    return [p for p in found if p[2] != "Z"]


def _wait_for(condition, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def main(mode: str, root: Path) -> dict:
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    held_r, held_w = os.pipe()
    host = subprocess.Popen([sys.executable, "-c", HOST, str(root), str(held_r) if mode == "setup" else "-1",
                             COMMANDS[mode]], pass_fds=(held_r,), cwd=Path(__file__).resolve().parents[1])
    os.close(held_r)
    if mode == "setup":  # the monitor and the namespace's first process exist; the latter is held in its setup
        started = _wait_for(lambda: sum(name == "bwrap" for _, name, _ in descendants()) >= 2)
        time.sleep(0.3)
    else:
        started = _wait_for(lambda: (root / "ws/ran").exists())
        time.sleep(0.3)
    host.kill()
    host.wait()
    with contextlib.suppress(BrokenPipeError):
        os.write(held_w, b"x")  # let a held bwrap finish its setup, its host gone
    os.close(held_w)
    time.sleep(3)
    while True:  # reap what was reparented here and has exited
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    survivors = descendants()
    for pid, _, _ in survivors:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return {"mode": mode, "started": started, "ran": (root / "ws/ran").exists(), "survivors": survivors}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], Path(sys.argv[2]))))
