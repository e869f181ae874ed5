"""What one side of the bench will run, decided before anything is written, and the order it is measured in.

`plan` reads and checks every input (params, tasks, the family and its modes, the overlay) and raises on any
that must be refused; `build_cells` turns a plan into cells in the order they are measured: task by task on
the incumbent side, and on the candidate side in random blocks that put each candidate arm beside its
control (`interleaved`), so whatever drifts while a side runs falls on both alike. Running them is
skillevo.bench.side.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from pathlib import Path

from skillevo.bench import mcpservers, workspace
from skillevo.bench.cell import CellSpec
from skillevo.core import arms as arms_mod
from skillevo.core import comparators as comparators_mod
from skillevo.core import controls as controls_mod
from skillevo.core import frontmatter, layout, models, placeholder, sampling
from skillevo.core import modes as modes_mod
from skillevo.core import overlay as overlay_mod
from skillevo.core import tasks as tasks_mod
from skillevo.core.config import BenchParams, Params
from skillevo.core.results import SIDES, load_side
from skillevo.files import documents, safefs
from skillevo.files.errors import BadInput
from skillevo.files.schemas import validate
from skillevo.stats import betting

MAX_OVERLAY_BYTES = 8 << 20


@dataclass
class SidePlan:
    side: str
    tasks_file: Path
    family: dict[str, bytes]  # the incumbent skills, `<skill>/<path>` -> bytes
    overlay: dict[str, bytes] | None  # the frozen overlay (candidate side)
    tasks: list[tasks_mod.Task]
    skipped: list[dict[str, str]]
    arms: list[arms_mod.Arm]
    runs: int
    skills_digest: str
    overlay_digest: str | None
    split: tasks_mod.Split
    executables: frozenset[str] = frozenset()  # family paths with an execute bit
    overlay_executables: frozenset[str] = frozenset()
    controls: list[arms_mod.Arm] = dataclass_field(default_factory=list)  # candidate side: the incumbent arms it
    # runs beside its candidate arms, in the same moment, interleaved (docs/gate.md, contemporaneous controls)
    replicate: int = 0
    comparators: dict[str, comparators_mod.SkillSet] = dataclass_field(default_factory=dict)  # by arm name
    designs: dict[str, betting.Design] | None = None  # candidate side: per control arm, its caps and bets

    metric: str = "cost_usd"  # what the caps bound (params gate.metric)
    mcp: dict[str, mcpservers.Frozen] = dataclass_field(default_factory=dict)  # the arms' MCP servers, by digest

    @property
    def moment(self) -> str:
        """The measuring moment every cell of this side shares: the incumbent side's skills, or the candidate's
        overlay, and the replicate. The simulator keys its drift between benches on it."""
        what = f"candidate/{self.overlay_digest}" if self.side == "candidate" else f"incumbent/{self.skills_digest}"
        return f"{what}/replicate-{self.replicate}"


def plan(side: str, tasks_file: Path, skills_dir: Path, overlay_dir: Path | None, params: Params,
         include_expensive: bool | None = None, *, modes: Path | None = None, incumbent: Path | None = None
         ) -> SidePlan:
    """What the side will run, with every input read and checked (nothing is written); `modes` is the
    family's modes manifest, which must match it (skillevo.core.modes); `incumbent`, the incumbent side's
    directory, sizes the candidate side's cost caps and the test's bets (skillevo.core.sampling.design)."""
    if side not in SIDES:
        raise BadInput(f"--side must be one of {', '.join(SIDES)}")
    executables: set[str] = set()
    family = layout.read_family(skills_dir, params.skills.frontmatter_keys, executables)
    if modes is not None:
        modes_mod.check(modes, skills_dir, executables)
    sets = {name: comparators_mod.read(arm.comparator, Path(params.source).parent, params.skills.frontmatter_keys,
                                       f"{params.source}: arms.{name}.comparator")
            for name, arm in sorted(params.arms.items()) if arm.comparator is not None and side == "incumbent"}
    arms_mod.check_skills(params.arms, layout.skill_names_in(family), params.source,
                          {name: layout.skill_names_in(found.files) for name, found in sets.items()})
    layout.check_evolvable(params.skills.evolvable, family, params.source)
    expensive = params.bench.include_expensive if include_expensive is None else include_expensive
    loaded = tasks_mod.load(tasks_file, target_roots=params.tasks.target_roots)
    placeholder.check_placeholders(loaded, tasks_file)  # before anything is measured on it
    split = tasks_mod.split(loaded, params.tasks.gate, params.tasks.evidence, params.tasks.shared, params.source)
    if side == "candidate":  # the candidate is judged on the gate's tasks only; evidence tasks teach the proposer
        loaded = [task for task in loaded if task.id in split.gate]
    chosen, skipped = tasks_mod.select(loaded, expensive)
    overlay_digest, files, controls = None, None, []
    overlay_executables: set[str] = set()
    frozen_arms, servers = mcpservers.freeze(params.arms, Path(params.source).parent, params.source)
    if side == "incumbent":
        if overlay_dir is not None:
            raise BadInput("the incumbent side takes no overlay (rule: --overlay is for the candidate side)")
        arm_list = [frozen_arms[n] if n not in sets else  # a comparator's digest goes into its cells' keys
                    _with_digest(frozen_arms[n], sets[n].digest) for n in sorted(frozen_arms)]
    else:
        if overlay_dir is None:
            raise BadInput("the candidate side needs --overlay, a frozen overlay directory (<skill>/...md)")
        files = {} if _declined(overlay_dir) else safefs.read_tree(
            overlay_dir, max_file_bytes=MAX_OVERLAY_BYTES, max_total_bytes=MAX_OVERLAY_BYTES, what="overlay file",
            executables=overlay_executables)
        frontmatter.check_family({**family, **files}, str(overlay_dir), layout.SKILL_FILE,
                                 params.skills.frontmatter_keys)  # what the candidate's sessions will load
        touched = {layout.skill_of(rel) for rel in files}
        arm_list = arms_mod.required_candidate_arms(touched, frozen_arms)
        if not arm_list and files:  # no files: a no_proposal generation's empty overlay, measured as nothing
            raise BadInput(f"{overlay_dir}: the overlay touches {sorted(touched)}, which no arm uses "
                           "(rule: required arms)")
        overlay_digest = layout.tree_digest(files, overlay_executables)
        controls = [frozen_arms[arm.incumbent] for arm in arm_list]
    runs = params.sampling.runs if side == "candidate" else params.sampling.incumbent_runs
    designs = None
    if incumbent is not None:
        if side != "candidate":
            raise BadInput("--incumbent sizes the candidate side; the incumbent side takes none (rule: design)")
        measured = load_side(incumbent, "incumbent")
        designs = sampling.designs(measured.rows, [t.id for t in chosen], [a.name for a in controls],
                                   params.sampling, params.gate.metric)
    return SidePlan(side, tasks_file, family, files, chosen, skipped, arm_list, runs,
                    layout.tree_digest(family, executables), overlay_digest, split, frozenset(executables),
                    frozenset(overlay_executables), controls, params.sampling.replicate, sets, designs,
                    params.gate.metric, mcp=servers)


def _with_digest(arm: arms_mod.Arm, digest: str) -> arms_mod.Arm:
    """`arm` with its comparator's digest filled in."""
    assert arm.comparator is not None  # `sets` holds only the arms with a comparator
    return replace(arm, comparator=replace(arm.comparator, digest=digest))


def _declined(overlay_dir: Path) -> bool:
    """A no_proposal generation's frozen overlay, which DVC does not restore on a pull (an empty directory): absent,
    beside a manifest that says declined. Anything else missing is refused by the tree reader."""
    manifest = overlay_dir.parent / "manifest.json"
    if overlay_dir.exists() or not manifest.is_file():
        return False
    found = validate(documents.load_json(manifest, what="freeze manifest"), "freeze-manifest", manifest)
    return found["candidate_origin"] == overlay_mod.DECLINED


def _template(p: SidePlan, tree: Path, kind: str, dest: Path) -> str:
    """A task's template for one kind of arm. A baseline arm's (skills `none`) holds no skill of the family, only
    an empty .claude/, over-mounted read-only like every arm's: the CLI finds no project skill (it still lists
    its own bundled ones, as it would for a user without skills) and the agent cannot install one."""
    if kind.startswith("comparator-"):  # a comparator arm's pinned set, in place of the family
        found = p.comparators[kind.removeprefix("comparator-")]
        return workspace.build_template(tree, found.files, None, dest, found.executables)
    if kind == "baseline":
        base = workspace.build_template(tree, {}, None, dest)
        (dest / ".claude").mkdir(exist_ok=True)
        if any((dest / ".claude").iterdir()):
            raise RuntimeError(f"{dest}/.claude: the baseline's template holds a skill")
        return base
    return workspace.build_template(tree, p.family, p.overlay if kind == "candidate" else None, dest, p.executables,
                                    p.overlay_executables)


def build_cells(p: SidePlan, bench: BenchParams, mdl: models.Model, scratch: Path) -> list[CellSpec]:
    """Every (task, arm, run) of the side, in the order they are measured (templates are built once per task and
    variant). The incumbent side runs task by task. The candidate side runs run by run, in blocks of (task, run):
    each block holds every candidate arm's cell and its control's (the incumbent arm, measured now, beside it) in
    a random order, so whatever drifts while the side runs falls on both arms alike."""
    cells: dict[tuple[str, str, int], CellSpec] = {}
    mcpservers.install(p.mcp, scratch)
    for task in p.tasks:
        tree = scratch / "trees" / task.id
        workspace.export_tree(task, tree)
        templates: dict[str, tuple[Path, str]] = {}
        for arm in (*p.controls, *p.arms):
            cand = arm.is_candidate
            kind = (f"comparator-{arm.name}" if arm.is_comparator else "baseline" if arm.is_baseline else
                    "candidate" if cand else "incumbent")
            if kind not in templates:
                dest = scratch / "templates" / f"{task.id}-{kind}"
                templates[kind] = (dest, _template(p, tree, kind, dest))
            template, base = templates[kind]
            control = p.overlay_digest if p.side == "candidate" and not cand else None
            cap = None if p.designs is None else p.designs[arm.incumbent].tasks[task.id].cap
            for run in range(1, p.runs + 1):
                cells[(task.id, arm.name, run)] = CellSpec(
                    task=task, arm=arm, run=run, side=p.side, template=template, base_commit=base,
                    skills_digest=p.skills_digest, overlay_digest=p.overlay_digest if cand else None, model=mdl,
                    scratch=scratch, churn_exclude=bench.churn_exclude, phase_timeout_s=bench.phase_timeout_s,
                    max_retries=bench.max_retries, limits=bench.limits, control_for=control,
                    budget_usd=cap if p.metric == "cost_usd" else None)
    order = list(cells) if p.side == "incumbent" else interleaved(p)
    return [replace(cells[key], moment=p.moment, slot=slot) for slot, key in enumerate(order)]


def rerun_cells(p: SidePlan, cells: list[CellSpec], blocks: list[tuple[str, int]]) -> list[CellSpec]:
    """Each spoiled (task, run) block measured again whole, every arm in a fresh slot: run numbers past any the
    side has used for the task, `replaces` naming the block it stands for (skillevo.core.controls.settle)."""
    latest: dict[str, int] = {}
    for cell in cells:
        latest[cell.task.id] = max(latest.get(cell.task.id, 0), cell.run)
    first = {(c.task.id, c.arm.name): c for c in cells if c.run == 1}
    out = []
    for task, replaced in blocks:
        latest[task] = run = latest[task] + 1
        slots = {cell: slot for slot, cell in enumerate(interleaved(p, run))}
        block = [replace(first[(task, arm.name)], run=run, replaces=replaced, slot=slots[(task, arm.name, run)])
                 for arm in (*p.controls, *p.arms)]
        out += sorted(block, key=lambda c: c.slot or 0)
    return out


def interleaved(p: SidePlan, runs: int | None = None) -> list[tuple[str, str, int]]:
    """The candidate side's order (skillevo.core.controls.order, which the gate draws again from bench.json): the
    tasks and arms in the order bench.json lists them."""
    return controls_mod.order(p.overlay_digest, p.replicate, [task.id for task in p.tasks],
                              [a.name for a in (*p.controls, *p.arms)], runs or p.runs)
