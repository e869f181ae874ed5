"""Contain a process with bubblewrap: one small interface used by every agent session and verifier.

    spec = SandboxSpec(workspace=..., private=..., env=..., mounts=...)
    finished = run(spec, argv, stdin=..., timeout_s=...)

`preflight()` proves, before any paid work, that bwrap and the namespaces it needs work here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path

from skillevo.core.limits import Limits
from skillevo.files.errors import BrokenEnvironment
from skillevo.sandbox import process
from skillevo.sandbox.bwrap import (
    HOME,
    LAUNCHER,
    LAUNCHER_DST,
    RELAY_DIR,
    SHM_MB,
    WORKDIR,
    Mount,
    SandboxSpec,
    base_env,
    command,
)
from skillevo.sandbox.process import Finished
from skillevo.sandbox.relay import PLACEHOLDER_KEY, Relay
from skillevo.sandbox.watch import Watch

__all__ = ["HOME", "LAUNCHER", "LAUNCHER_DST", "PLACEHOLDER_KEY", "RELAY_DIR", "SHM_MB", "WORKDIR", "Finished",
           "Limits", "Mount", "Relay", "SandboxSpec", "SandboxUnavailable", "base_env", "command", "preflight", "run"]


class SandboxUnavailable(BrokenEnvironment):
    """bwrap is missing or cannot create the namespaces it needs; the message says what to do."""


def preflight() -> None:
    """Fail early and clearly when sessions could not be contained."""
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed: run `make setup` as root, or `sudo apt-get install -y bubblewrap`")
    if shutil.which("socat") is None:
        raise SandboxUnavailable("socat is not installed (the model relay and Claude's inner sandbox need it): "
                                 "run `make setup` as root, or `sudo apt-get install -y socat`")
    if shutil.which("prlimit") is None:
        raise SandboxUnavailable("prlimit (util-linux) is not installed (per-cell limits need it): run `make setup` as "
                                 "root, or `sudo apt-get install -y util-linux`")
    with tempfile.TemporaryDirectory(prefix="skillevo-preflight-") as tmp:
        ws, private = Path(tmp, "ws"), Path(tmp, "private")
        ws.mkdir()
        finished = run(SandboxSpec(workspace=ws, private=private, env=base_env()), ["/bin/true"], timeout_s=30)
    if finished.state != "exited" or finished.returncode != 0:
        detail = finished.stderr_tail.decode(errors="replace").strip()
        raise SandboxUnavailable(
            f"bubblewrap cannot create its sandbox here ({detail or finished.state}). It needs unprivileged user "
            "namespaces (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0); inside Docker "
            "run with --security-opt seccomp=unconfined --security-opt apparmor=unconfined "
            "--security-opt systempaths=unconfined (see docs/troubleshooting.md)")


class _Namespace:
    """Holds the sandbox's PID-namespace init (from bwrap's JSON status) so it can be killed for certain.

    Killing init from outside its namespace tears down everything inside: the agent, its tools, the
    relay's socat, any background process. bwrap's own exit does not guarantee that on every path.
    """

    def __init__(self, read_fd: int) -> None:
        self._file = os.fdopen(read_fd, "rb")
        self._pidfd: int | None = None
        self.pid: int | None = None
        self._known = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self._file:
                try:
                    pid = json.loads(line).get("child-pid")
                except ValueError:
                    continue
                if isinstance(pid, int) and self._pidfd is None:
                    self.pid = pid
                    try:
                        self._pidfd = os.pidfd_open(pid)
                    except OSError:
                        pass
                    self._known.set()
        finally:
            self._known.set()
            self._file.close()

    def kill(self) -> None:
        self._known.wait(2.0)
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except OSError:
                pass  # already gone
            os.close(self._pidfd)
            self._pidfd = None


class _Lifeline:
    """One pipe per process: this process holds the only write end, for as long as it lives, and never writes;
    every sandbox gets a copy of the read end, which reads as end-of-file once this process is gone."""

    _lock = threading.Lock()
    _pid: int | None = None
    _read: int = -1

    @classmethod
    def fd(cls) -> int:
        """A fresh copy of the read end, for one sandbox (the caller hands it over and closes it)."""
        with cls._lock:
            if cls._pid != os.getpid():  # first use, or a forked child: a pipe of its own
                cls._read, _write = os.pipe()  # both close-on-exec; the write end is kept open on purpose
                cls._pid = os.getpid()
            return os.dup(cls._read)


def run(spec: SandboxSpec, argv: list[str], *, stdin: bytes = b"", timeout_s: float, **kwargs) -> Finished:
    """Run `argv` contained; with spec.limits, a crossed limit stops the whole sandbox (state "limit")."""
    lifeline = _Lifeline.fd()
    read_fd, write_fd = os.pipe()
    namespace = _Namespace(read_fd)
    watch = None
    if spec.limits is not None:
        workspace = spec.workspace if spec.workspace_writable else None
        writable = tuple(m.src for m in spec.mounts if m.writable) + \
            ((spec.relay_socket_dir,) if spec.relay_socket_dir is not None else ())
        watch = Watch(spec.limits, lambda: namespace.pid, workspace, writable).exceeded
    try:
        return process.run(command(spec, argv, status_fd=write_fd, lifeline_fd=lifeline), stdin=stdin,
                           timeout_s=timeout_s, pass_fds=(write_fd, lifeline), watch=watch, **kwargs)
    finally:
        namespace.kill()

