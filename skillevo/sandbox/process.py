"""Run a command as the owner of its whole process tree, with a deadline and bounded output.

The child gets its own session; on timeout or cancellation the whole group gets SIGTERM, then SIGKILL.
Under bwrap (--die-with-parent, a PID namespace) killing the group tears the sandbox down with
everything started inside it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

GRACE_S = 2.0


@dataclass(frozen=True)
class Finished:
    state: str  # exited | timeout | cancelled | limit | spawn-failure
    returncode: int | None
    stdout: bytes
    stdout_truncated: bool
    stderr_tail: bytes
    wall_s: float
    limit: str | None = None  # which limit stopped it (state "limit")


class _Capture(threading.Thread):
    """Drain a pipe; keep the first `head` bytes (or the last `tail` bytes)."""

    def __init__(self, pipe, head: int = 0, tail: int = 0) -> None:
        super().__init__(daemon=True)
        self.pipe, self.head, self.tail = pipe, head, tail
        self.data = bytearray()
        self.truncated = False

    def run(self) -> None:
        for chunk in iter(lambda: self.pipe.read1(65536), b""):
            if self.head:
                room = self.head - len(self.data)
                if room < len(chunk):
                    self.truncated = True
                self.data += chunk[:max(room, 0)]
            else:
                self.data += chunk
                if len(self.data) > self.tail:
                    del self.data[: len(self.data) - self.tail]
        self.pipe.close()


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM, a grace period for the leader, then SIGKILL for whatever is left in the group.

    The final SIGKILL is not optional: when bwrap's monitor dies of the SIGTERM, helpers it started
    (the relay's socat) can still be alive in the group.
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run(argv: list[str], *, stdin: bytes = b"", timeout_s: float, max_stdout: int = 8 << 20,
        stderr_tail: int = 64 << 10, env: dict[str, str] | None = None, cwd: str | None = None,
        cancel: threading.Event | None = None, pass_fds: tuple[int, ...] = (),
        watch: Callable[[], str | None] | None = None) -> Finished:
    """Run `argv` to completion, timeout, cancellation or a crossed limit (`watch` names it). The fds in
    `pass_fds` are handed to the child and closed here once it has started."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env if env is not None else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                                cwd=cwd, start_new_session=True, pass_fds=pass_fds)
    except OSError as e:
        return Finished("spawn-failure", None, b"", False, str(e).encode(), 0.0)
    finally:
        for fd in pass_fds:
            os.close(fd)
    out = _Capture(proc.stdout, head=max_stdout)
    err = _Capture(proc.stderr, tail=stderr_tail)
    out.start()
    err.start()
    assert proc.stdin is not None  # stdin=PIPE
    try:
        proc.stdin.write(stdin)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    state, limit = "exited", None
    deadline = start + timeout_s
    try:
        while proc.poll() is None:
            if cancel is not None and cancel.is_set():
                state = "cancelled"
                break
            if time.monotonic() >= deadline:
                state = "timeout"
                break
            if watch is not None and (limit := watch()) is not None:
                state = "limit"
                break
            try:
                proc.wait(0.05)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if state != "exited" or proc.poll() is None:
            _kill_group(proc)
        else:
            # the leader is gone; anything it left in its group goes with it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    out.join(5)
    err.join(5)
    return Finished(state, proc.returncode, bytes(out.data), out.truncated, bytes(err.data), time.monotonic() - start,
                    limit)
