"""Propose stage: one contained agent session reads the evidence and writes ONE bounded candidate.

    python -m stages.propose

Writes results/proposal/overlay/<skill>/SKILL.md, proposal.md, session.json (the measured session
record, with the proposer's model) and transcripts/. With the simulator backend, the simulator plays
the proposer.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

from skillevo import overlay, propose
from skillevo import params as params_mod
from skillevo.simulator import Simulator, load_dir
from skillevo.simulator.proposer import SimulatedProposer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stages.propose", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evidence", type=Path, default=Path("results/evidence"), help="[%(default)s]")
    parser.add_argument("--prompt", type=Path, default=Path("prompts/propose.md"), help="template [%(default)s]")
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="[%(default)s]")
    parser.add_argument("--playbooks", type=Path, default=Path("tasks/playbooks"),
                        help="the simulator's playbooks (simulator backend only) [%(default)s]")
    parser.add_argument("--out", type=Path, default=Path("results/proposal"), help="[%(default)s]")
    args = parser.parse_args(argv)
    params = params_mod.load(args.params)
    skills_cfg = params_mod.section(params, "skills")
    evolvable = list(skills_cfg.get("evolvable") or [])
    prop = params_mod.section(params, "propose")
    limits = overlay.Limits.from_params(params)
    try:
        with ExitStack() as stack:
            sim_url = None
            if params_mod.section(params, "model").get("backend", "simulator") == "simulator":
                book = load_dir(args.playbooks)
                sim = stack.enter_context(Simulator(book, responders={"proposer": SimulatedProposer(book, set(evolvable))}))
                sim_url = sim.url("proposer")
            model, api_key = params_mod.model(params, sim_url)
            record = propose.run(
                prompt=propose.render_prompt(args.prompt.read_text(), evolvable, limits.max_changed_lines),
                skills_dir=Path(skills_cfg.get("dir", "skills")), evidence_dir=args.evidence, evolvable=evolvable,
                model=prop.get("model") or model.name, endpoint=model.endpoint, api_key=api_key, limits=limits,
                out=args.out, timeout_s=float(prop.get("timeout_s", 1800)), effort=model.effort)
    except (ValueError, OSError) as e:
        print(f"propose: {e}", file=sys.stderr)
        return 2
    print(f"propose: {', '.join(record['overlay_files'])} ({record['changed_lines']} changed lines); "
          f"see {args.out / 'proposal.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
