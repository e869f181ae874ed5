"""Stage `propose`: one contained agent session reads the evidence and writes ONE bounded candidate.

    python -m skillevo.stages.propose

Writes <out>/overlay/<skill>/SKILL.md, proposal.md, session.json (the measured session record, with the
proposer's model) and transcripts/; or, when the proposer finds nothing in the evidence to change, proposal.md
headed `# No proposal` and no overlay (a no_proposal generation: freeze, bench and gate pass it on, cheaply).
With the simulator backend, the simulator plays the proposer.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

from skillevo import backends, propose
from skillevo.core import layout, overlay, stage
from skillevo.core.declared import Declared
from skillevo.files.errors import BrokenEnvironment

# the params this stage reads: `tracked` is its dvc.yaml entry's `params:` (tests/test_declared_params.py)
PARAMS = Declared(("model", "propose", "skills.evolvable", "skills.frontmatter_keys"),
                  untracked=("skills.root", "skills.paths.skills"))  # without --skills, which dvc.yaml passes


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skillevo.stages.propose", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--evidence", type=Path, default=layout.EVIDENCE, help="[%(default)s]")
    p.add_argument("--prompt", type=Path, default=propose.PROMPT, help="template [%(default)s]")
    p.add_argument("--params", type=Path, default=layout.PARAMS, help="[%(default)s]")
    stage.family_options(p, mirrors=False)
    p.add_argument("--playbooks", type=Path, default=layout.PLAYBOOKS,
                   help="the simulator's playbooks (simulator backend only) [%(default)s]")
    p.add_argument("--out", type=Path, default=layout.PROPOSAL, help="[%(default)s]")
    return p


def run(args: argparse.Namespace) -> str:
    params = stage.load_params("propose", args, PARAMS)
    evolvable = list(params.skills.evolvable)
    limits = overlay.Limits.from_params(params)
    prompt = propose.render_prompt(args.prompt, evolvable, limits.max_changed_lines, limits.allow)
    with ExitStack() as stack:
        sim = None
        if params.model.simulated:  # a backend like the others: imported only when params choose it
            from skillevo.simulator import Playbook, Simulator, generic, load_dir
            from skillevo.simulator.proposer import SimulatedProposer

            book = load_dir(args.playbooks)
            family = layout.read_family(stage.skills_dir(args, params), params.skills.frontmatter_keys)
            known = generic.command_instructions(family, evolvable)  # the generic agent's steps, for tasks it plays
            merged = Playbook({**known.instructions, **book.instructions}, book.tasks + known.tasks)
            proposer = SimulatedProposer(merged, set(evolvable), skills_path=params.skills.skills)
            sim = Simulator(book, responders={"proposer": proposer})
        model, credential = stack.enter_context(backends.open_model(params.model, simulator=sim,
                                                                    name=params.proposer_model))
        try:
            record = propose.run(prompt=prompt, skills_dir=stage.skills_dir(args, params), evidence_dir=args.evidence,
                                 evolvable=evolvable, model=model, credential=credential, limits=limits, out=args.out,
                                 timeout_s=params.propose.timeout_s,
                                 route="/mode/proposer" if sim is not None else None)
        finally:
            if sim is not None and sim.failures:  # what went wrong is the offline simulator, not the API
                raise BrokenEnvironment(f"the offline simulator failed while playing the proposer: {sim.failures[0]} "
                                        f"(see {args.out / 'session.json'})")
    if record.get("declined"):
        return (f"propose: no proposal: {propose.declined(args.out)} (freeze, the candidate bench and the gate "
                f"record a no_proposal generation; see {args.out / 'proposal.md'})")
    return (f"propose: {', '.join(record['overlay_files'])} ({record['changed_lines']} changed lines); "
            f"see {args.out / 'proposal.md'}")


def main(argv: list[str] | None = None) -> int:
    return stage.main("propose", parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
