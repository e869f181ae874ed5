"""The bubblewrap command line for one contained process.

Everything a contained process can see is listed here: read-only system directories, a private HOME
and /tmp, the workspace (the only writable tree), extra read-only mounts (the skills under test, the
CLI binary), and an environment built from nothing. The root and /dev are tmpfs mounts bubblewrap makes and
cannot size, so both are remounted read-only once every mount point is in place: the writable tmpfs mounts are
/tmp, HOME and /dev/shm, each of a fixed size. There is no network namespace shared with the
host: the only way out is the model relay's Unix socket, when one is given.

`nested` is the sandbox inside that one for what the contained CLI starts on its own (an arm's MCP servers): the
same system view, the workspace, fresh sized /tmp, HOME and /dev/shm, and nothing of the CLI's: no network
namespace of its (so neither the relay's loopback port nor its socket), no /proc of its (whose /proc/<pid>/root
reaches the socket through the CLI's mount namespace), no environment of its.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from skillevo.core.limits import Limits

WORKDIR = "/work"
HOME = "/home/agent"
RELAY_DIR = "/run/skillevo"
RELAY_SOCKET = f"{RELAY_DIR}/relay.sock"
LAUNCHER = Path(__file__).resolve().parent / "launch.sh"  # every sandbox's first process
LAUNCHER_DST = "/opt/skillevo/launch.sh"
UID = GID = 1000
SHM_MB = 64  # /dev/shm without per-cell limits (the preflight, the proposer); with them, bench.limits.tmp_mb

_SYSTEM_DIRS = ("bin", "lib", "lib64", "lib32", "libx32", "sbin")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/nsswitch.conf", "/etc/localtime", "/etc/alternatives", "/etc/ssl")


@dataclass(frozen=True)
class Mount:
    src: Path
    dst: str
    writable: bool = False


@dataclass(frozen=True)
class SandboxSpec:
    """One contained process. `private` is a host directory of ours that holds HOME, /tmp and files."""

    workspace: Path
    private: Path
    env: dict[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()  # applied in order, after the workspace (so they may over-mount it)
    workspace_writable: bool = True
    relay_socket_dir: Path | None = None
    limits: Limits | None = None  # None: no per-cell limits (the preflight, the proposer)


def base_env() -> dict[str, str]:
    """The environment every contained process starts from: nothing of the caller's."""
    return {
        "PATH": "/opt/claude:/usr/local/bin:/usr/bin:/bin",
        "HOME": HOME,
        "USER": "agent",
        "LOGNAME": "agent",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "CI": "1",
        "NO_COLOR": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _identity_files(private: Path) -> list[str]:
    """A passwd/group that name only the sandbox user, so tools that look it up work."""
    etc = private / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "passwd").write_text(f"agent:x:{UID}:{GID}:agent:{HOME}:/bin/bash\n"
                                "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n")
    (etc / "group").write_text(f"agent:x:{GID}:\nnogroup:x:65534:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
    return ["--ro-bind", str(etc / "passwd"), "/etc/passwd", "--ro-bind", str(etc / "group"), "/etc/group",
            "--ro-bind", str(etc / "hosts"), "/etc/hosts"]


def command(spec: SandboxSpec, argv: list[str], status_fd: int | None = None,
            lifeline_fd: int | None = None) -> list[str]:
    """The full argv: bwrap, its options, then the launcher and `argv` to run inside.

    With `status_fd`, bwrap reports the sandbox's first process (the PID namespace's init) there as
    JSON, so the caller can kill the whole namespace however bwrap itself ended. `lifeline_fd` is read
    inside by the launcher: end-of-file there means the caller is gone and the sandbox kills itself.
    """
    for sub in ("home", "tmp"):
        (spec.private / sub).mkdir(parents=True, exist_ok=True)
    args = [
        "bwrap",
        "--unshare-user", "--uid", str(UID), "--gid", str(GID),
        "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try",
        "--hostname", "sandbox",
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--clearenv",
        "--ro-bind", "/usr", "/usr",
    ]
    for name in _SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    for path in _ETC_FILES:
        args += ["--ro-bind-try", path, path]
    args += _identity_files(spec.private)
    shm = (spec.limits.tmp_mb if spec.limits is not None else SHM_MB) << 20
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(shm), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    if spec.limits is None:
        args += ["--bind", str(spec.private / "tmp"), "/tmp", "--bind", str(spec.private / "home"), HOME]
    else:  # sized tmpfs mounts: a flood of /tmp or HOME fills this sandbox's memory quota, not the host's disk
        size = str(spec.limits.tmp_mb << 20)
        args += ["--size", size, "--perms", "1777", "--tmpfs", "/tmp",
                 "--size", size, "--perms", "0700", "--tmpfs", HOME]
    args += ["--bind" if spec.workspace_writable else "--ro-bind", str(spec.workspace), WORKDIR]
    if spec.relay_socket_dir is not None:
        args += ["--bind", str(spec.relay_socket_dir), RELAY_DIR]
    for m in spec.mounts:
        args += ["--bind" if m.writable else "--ro-bind", str(m.src), m.dst]
    args += ["--ro-bind", str(LAUNCHER), LAUNCHER_DST]
    args += ["--remount-ro", "/"]  # after the last mount point: nothing more is made on the unsized root
    env = dict(spec.env)
    if lifeline_fd is not None:
        env["SKILLEVO_LIFELINE_FD"] = str(lifeline_fd)
    for key, value in sorted(env.items()):
        args += ["--setenv", key, value]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    args += ["--chdir", WORKDIR, "--"]
    prefix = spec.limits.prlimit() if spec.limits is not None else []
    return prefix + args + ["/bin/bash", LAUNCHER_DST, *argv]  # by bash: an installed copy may lack its x bit


def nested(argv: list[str], tmp_mb: int) -> list[str]:
    """The argv a contained process runs to start `argv` in a sandbox of its own (see the module's docstring). A
    nested PID namespace cannot mount a proc here (bwrap's /proc has read-only submounts), so /proc is empty."""
    size = str(tmp_mb << 20)
    tiny = str(64 << 10)
    args = [
        "bwrap",
        "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
        "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
        "--ro-bind", "/", "/",
        "--size", tiny, "--tmpfs", "/proc", "--remount-ro", "/proc",
        "--size", tiny, "--tmpfs", RELAY_DIR, "--remount-ro", RELAY_DIR,
        "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
        "--size", size, "--perms", "1777", "--tmpfs", "/tmp",
        "--size", size, "--perms", "0700", "--tmpfs", HOME,
        "--bind", WORKDIR, WORKDIR,
        "--remount-ro", "/",
    ]
    for key, value in sorted(base_env().items()):
        args += ["--setenv", key, value]
    return args + ["--chdir", WORKDIR, "--", *argv]
