"""Stage `identity`: write each stage's harness identity, the file dvc.yaml makes that stage depend on.

    python -m skillevo.stages.identity --params params.yaml --out results/identity

One small JSON file per stage: the skillevo version and a digest of exactly the code the stage runs (its script's
import closure and the data files those modules load: skillevo.bench.harness). DVC runs this stage every time
(`always_changed`) and compares each file by content, so an upgrade of skillevo, or an edit in a checkout,
re-runs the stages whose code changed and nothing else, wherever the package is installed. The bench's file also
carries the digest of each arm's MCP server files (skillevo.bench.mcpservers), which live outside every stage's
declared dependencies: an edited server re-runs the bench as an edited harness would.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from skillevo.bench import harness
from skillevo.core import layout, stage
from skillevo.core.declared import Declared
from skillevo.files import documents, safefs

# the params this stage reads: `tracked` is its dvc.yaml entry's `params:` (tests/test_declared_params.py)
PARAMS = Declared(("arms",))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.stages.identity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=layout.IDENTITY, help="[%(default)s]")
    p.add_argument("--params", type=Path, default=None, help="params.yaml, for the arms' MCP servers")
    return p


def _servers(path: Path) -> dict[str, str]:
    """Each arm's MCP servers' digests. Loading and checking params and reading the servers costs more than the rest
    of this stage, which runs on every repro: a file that names no server is done with at its YAML."""
    doc = documents.load_yaml(path, what="params file")
    arms = doc.get("arms") if isinstance(doc, dict) else None
    if not isinstance(arms, dict) or not any(isinstance(arm, dict) and arm.get("mcp") for arm in arms.values()):
        return {}
    from skillevo.bench import mcpservers
    from skillevo.core import config
    from skillevo.core.declared import guard

    params = guard(config.load(path), PARAMS, "identity")
    frozen, _ = mcpservers.freeze(params.arms, path.parent, str(path))
    digests = {}
    for name, arm in frozen.items():
        for server in arm.mcp:
            assert server.digest is not None  # freeze filled it in
            digests[f"{name}.{server.name}"] = server.digest
    return digests


def run(args: argparse.Namespace) -> str:
    names = harness.stage_names()
    servers = _servers(args.params) if args.params is not None else {}
    for name in names:
        identity: dict[str, Any] = harness.stage_identity(name)  # the bench's gets its servers too
        if name == "bench" and servers:
            identity["mcp_servers"] = servers
        safefs.write_atomic(args.out / f"{name}.json", documents.dump_json(identity))
    return f"identity: skillevo {harness.package_version()}, {len(names)} stages: {args.out}"


def main(argv: list[str] | None = None) -> int:
    return stage.main("identity", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
