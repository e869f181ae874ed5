"""Contain a process with bubblewrap: one small interface used by every agent session and verifier.

    spec = SandboxSpec(workspace=..., private=..., env=..., mounts=...)
    finished = run(spec, argv, stdin=..., timeout_s=...)

`preflight()` proves, before any paid work, that bwrap and the namespaces it needs work here.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from skillevo.sandbox import process
from skillevo.sandbox.bwrap import HOME, RELAY_DIR, WORKDIR, Mount, SandboxSpec, base_env, command
from skillevo.sandbox.process import Finished
from skillevo.sandbox.relay import PLACEHOLDER_KEY, Relay

LAUNCHER = Path(__file__).resolve().parent / "launch.sh"
LAUNCHER_DST = "/opt/skillevo/launch.sh"

__all__ = ["HOME", "LAUNCHER", "LAUNCHER_DST", "PLACEHOLDER_KEY", "RELAY_DIR", "WORKDIR", "Finished", "Mount",
           "Relay", "SandboxSpec", "SandboxUnavailable", "base_env", "command", "preflight", "run"]


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot create the namespaces it needs; the message says what to do."""


def preflight() -> None:
    """Fail early and clearly when sessions could not be contained."""
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed: run `make setup` as root, or `sudo apt-get install -y bubblewrap`")
    if shutil.which("socat") is None:
        raise SandboxUnavailable("socat is not installed (the model relay and Claude's inner sandbox need it): "
                                 "run `make setup` as root, or `sudo apt-get install -y socat`")
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
            "--security-opt systempaths=unconfined (see README, Troubleshooting)")


def run(spec: SandboxSpec, argv: list[str], *, stdin: bytes = b"", timeout_s: float, **kwargs) -> Finished:
    return process.run(command(spec, argv), stdin=stdin, timeout_s=timeout_s, **kwargs)

