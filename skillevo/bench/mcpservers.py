"""An arm's MCP servers, frozen: their files read once when the side is planned, bounded like an overlay, digested
into every cell key of the arm, and written once per bench as a read-only tree each cell mounts at
/opt/skillevo/mcp/<name> (skillevo.core.arms.McpServer). What a server runs is therefore what was planned,
whatever an agent or anyone else changes in the repository or the workspace between sessions.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from skillevo.core import layout
from skillevo.core.arms import Arm, McpServer
from skillevo.files import safefs
from skillevo.files.errors import BadInput
from skillevo.sandbox import Mount

MAX_BYTES = 4 << 20  # one server's files, as for an overlay or a comparator
MAX_FILES = 1000


@dataclass(frozen=True)
class Frozen:
    files: dict[str, bytes]
    executables: frozenset[str]
    digest: str


def read(server: McpServer, base: Path, where: str) -> Frozen:
    """The server's files as they are now (BadInput naming the params key and the rule)."""
    root = Path(server.dir) if Path(server.dir).is_absolute() else base / server.dir
    executables: set[str] = set()
    try:
        files = safefs.read_tree(root, max_file_bytes=MAX_BYTES, max_total_bytes=MAX_BYTES, max_files=MAX_FILES,
                                 what="MCP server file", executables=executables)
    except BadInput as e:
        raise BadInput(f"{where}.dir: {e}") from None
    if not files:
        raise BadInput(f"{where}.dir: {root} holds no file (rule: an MCP server runs from its own files)")
    return Frozen(files, frozenset(executables), layout.tree_digest(files, executables))


def freeze(arms: Mapping[str, Arm], base: Path, source: str) -> tuple[dict[str, Arm], dict[str, Frozen]]:
    """`arms` with every server's digest filled in, and the frozen files by digest."""
    found: dict[str, Frozen] = {}
    out = {}
    for name, arm in sorted(arms.items()):
        servers = []
        for server in arm.mcp:
            frozen = read(server, base, f"{source}: arms.{name}.mcp.{server.name}")
            found[frozen.digest] = frozen
            servers.append(replace(server, digest=frozen.digest))
        out[name] = replace(arm, mcp=tuple(servers))
    return out, found


def location(scratch: Path, server: McpServer) -> Path:
    """Where a bench keeps one server's frozen tree (the one place that names it)."""
    if server.digest is None:
        raise ValueError(f"MCP server {server.name} was never frozen")
    return scratch / "mcp" / server.digest


def install(found: Mapping[str, Frozen], scratch: Path) -> None:
    """Each frozen tree, once, read-only: a cell mounts it read-only too, so neither side of a mount can write it."""
    for digest, frozen in found.items():
        dest = scratch / "mcp" / digest
        if dest.exists():
            continue
        for rel, data in sorted(frozen.files.items()):
            path = dest / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            safefs.create_at(None, path, data, mode=0o555 if rel in frozen.executables else 0o444)
        for folder, _, _ in sorted(os.walk(dest), reverse=True):
            os.chmod(folder, 0o555)


def mounts(arm: Arm, scratch: Path) -> tuple[Mount, ...]:
    return tuple(Mount(location(scratch, server), server.mount) for server in arm.mcp)
