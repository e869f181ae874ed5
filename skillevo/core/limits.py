"""Per-cell resource limits: what one cell may take (params bench.limits) and what enforces each.

A plain value, kept apart from the sandbox that enforces it (skillevo.sandbox.limits), so params and the
bench's provenance can name the limits without importing the sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """params bench.limits (schemas/params.schema.json holds the defaults)."""

    processes: int
    memory_mb: int
    cpu_s: int
    disk_mb: int  # how much the workspace may grow
    tmp_mb: int  # /tmp, HOME and /dev/shm, each
    file_mb: int  # any one file

    def enforced(self) -> dict[str, dict[str, object]]:
        """What bench.json states: every limit, its value and the mechanism that enforces it."""
        watch = "watchdog over the sandbox's process tree"
        return {
            "processes": {"value": self.processes, "mechanism": watch},
            "memory_mb": {"value": self.memory_mb, "mechanism": f"{watch} (private resident memory)"},
            "cpu_s": {"value": self.cpu_s, "mechanism": f"{watch} (the whole tree); RLIMIT_CPU per process"},
            "disk_mb": {"value": self.disk_mb, "mechanism": ("watchdog over the allocated blocks of the workspace "
                                                             "and the other writable mounts, and every tmpfs inside")},
            "tmp_mb": {"value": self.tmp_mb, "mechanism": ("tmpfs of this size for /tmp, HOME and /dev/shm (bwrap "
                                                           "--size); the root and /dev read-only")},
            "file_mb": {"value": self.file_mb, "mechanism": "RLIMIT_FSIZE"},
        }

    def prlimit(self) -> list[str]:
        """The kernel limits, as a command prefix (util-linux prlimit sets them, then execs bwrap)."""
        return ["prlimit", f"--fsize={self.file_mb << 20}", f"--cpu={self.cpu_s}", "--core=0", "--"]
