"""params.yaml, read once: defaults from schemas/params.schema.json, validated, returned as frozen typed sections.

The schema is the only place a default or a range is written. Missing keys are filled from it before
validation, so a typo (`runz`) is refused rather than silently left at its default, and every number must be
finite. Stages and library modules take the sections they need from `Params`; nothing reads params.yaml
any other way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import UTC, date, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from skillevo.core import layout, models
from skillevo.core.arms import Arm, McpServer, Session, check_shapes
from skillevo.core.comparators import Comparator
from skillevo.core.limits import Limits
from skillevo.files import documents
from skillevo.files.errors import BadInput
from skillevo.files.schemas import fill_defaults, load_schema, validate

SCHEMA = "params"
MAX_PARAMS_BYTES = 1 << 20


@dataclass(frozen=True)
class ModelParams:
    backend: str  # simulator | anthropic | endpoint | openai | litellm
    name: str
    base_url: str | None
    effort: str | None
    upstream: str | None = None  # openai/litellm: "simulator" answers offline in the OpenAI dialect
    provider_model: str | None = None  # litellm: LiteLLM's provider/model (ollama/qwen3:8b, openrouter/...)
    key_env: str | None = None  # litellm: the variable holding the provider's key (none for a local server)
    prices: tuple[float, float, float] | None = None  # USD per million tokens: input, cached input, output

    @property
    def simulated(self) -> bool:
        return self.backend == "simulator" or self.upstream == "simulator"


@dataclass(frozen=True)
class SkillsParams:
    evolvable: tuple[str, ...]
    skills: str  # the canonical directory, repo-relative
    mirrors: tuple[str, ...]
    frontmatter_keys: frozenset[str] = frozenset()  # allowed beyond the specification's (skillevo.core.frontmatter)
    root: str = "."  # the git repository's root, relative to the pipeline's folder: skills and mirrors are below it

    @property
    def roots(self) -> tuple[str, ...]:
        """Every directory that holds the family: the canonical one first, then the mirrors."""
        return (self.skills, *self.mirrors)


@dataclass(frozen=True)
class TasksParams:
    target_roots: tuple[str, ...]
    gate: tuple[str, ...]  # skillevo.core.tasks.split reads these three
    evidence: tuple[str, ...]
    shared: bool


@dataclass(frozen=True)
class EvidenceParams:
    max_rows: int
    max_transcripts_per_row: int
    max_file_bytes: int
    max_bundle_bytes: int
    max_learnings: int
    verify_tail_chars: int
    max_rejected: int  # newest rejected candidates of this incumbent the proposer sees (skillevo.core.memory)


@dataclass(frozen=True)
class ProposeParams:
    max_changed_lines: int
    timeout_s: float
    model: str | None
    allow: tuple[str, ...] = ()  # supporting-files | scripts | privileged-frontmatter (skillevo.core.overlay)


@dataclass(frozen=True)
class SimulatorParams:
    noise: str  # none | demo | realistic | drifting (skillevo.simulator.noise)
    seed: int


@dataclass(frozen=True)
class SequentialParams:
    """`sampling.sequential`: the candidate side's looks and the rule skillevo.core.sampling.interim stops them by."""

    enabled: bool
    first: int  # candidate runs per (task, arm) at the first look
    batch: int  # added at each later look, up to sampling.runs
    metric: str
    alpha: float  # efficacy, spent over the looks
    min_improvement_pct: float
    max_resolution_drop_pct: float
    min_total_runs: int  # an early stop to promote needs this many valid runs per arm over the gate's tasks
    futility_p_value: float
    futility_confidence: float  # 0: off
    futility_below_pct: float  # the saving worth the remaining runs (the plan's design alternative)


@dataclass(frozen=True)
class CostCap:
    """`sampling.cost_cap`: each task's per-run cost cap from the incumbent side (core.sampling.design)."""
    quantile: float
    min_factor: float
    max_factor: float


@dataclass(frozen=True)
class SamplingParams:
    runs: int  # the candidate side's runs per (task, arm), its controls' too
    incumbent_runs: int  # the incumbent side's
    replicate: int
    prior_cv: float
    power: float
    sequential: SequentialParams
    plan_saving_pct: float  # the saving the bets are sized for (skillevo.stats.betting)
    cost_cap: CostCap


@dataclass(frozen=True)
class BenchParams:
    workers: int
    executor: str  # local | ray
    ray_address: str | None
    ray_max_retries: int
    ray_cell_resources: Mapping[str, float]
    include_expensive: bool
    phase_timeout_s: float
    max_retries: int
    churn_exclude: tuple[str, ...]
    limits: Limits
    max_consecutive_failures: int = 5  # systemic failures in a row that stop a side (skillevo.bench.side)
    max_excluded_pct: float = 20.0  # more excluded rows than this fail the side
    fault_reruns_pct: float = 50.0  # candidate side: blocks a fault spoiled measured again, % of scheduled blocks
    canary: bool = False  # a reused incumbent arm pays one stored cell again (skillevo/bench/canary.py)
    canary_tolerance: float = 1.5  # how far outside the stored runs' range a canary's metric may lie
    check_runs: int = 3  # each task's checks, at the bug and with the solution, to find a flaky test (task_soundness)


@dataclass(frozen=True)
class Policy:
    """The gate's policy (`gate:`). Bound whole into promotion.json, so apply sees exactly what the gate saw."""

    policy: str  # per_resolved | geometric | seed
    metric: str
    min_runs: int
    min_total_runs: int  # valid runs per arm over the gate's tasks before the cost test is trusted
    alpha: float
    test: str  # bootstrap | betting: per_resolved's test (docs/gate.md, the test)
    min_improvement_pct: float
    quality_alpha: float
    max_resolution_drop_pct: float
    max_task_regression_pct: float
    max_failed_task_regression_pct: float
    min_gated_task_ratio: float
    resolution_margin: int
    max_age_days: int
    look_boundary: str  # spending | bonferroni: the level at a sequential candidate side's stopped look
    family_alpha: float = 0.05  # make evolve: any false promotion over the evolution (skillevo.gate.family)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "gate policy") -> Policy:
        """Missing keys take the schema's defaults; an unknown key or a bad value is BadInput naming `source`."""
        return section(cls, "gate", values, source)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Params:
    source: str
    model: ModelParams
    skills: SkillsParams
    tasks: TasksParams
    evidence: EvidenceParams
    propose: ProposeParams
    arms: Mapping[str, Arm]
    bench: BenchParams
    gate: Policy
    simulator: SimulatorParams
    sampling: SamplingParams
    notes: tuple[str, ...] = ()  # warnings worth printing (a short model id, a deprecated model)

    @property
    def proposer_model(self) -> str:
        return self.propose.model or self.model.name


T = TypeVar("T")


def _check_model(model: Mapping[str, Any], source: str) -> None:
    """Which keys go with which backend beyond base_url's (the schema's): a key another backend reads is a mistake,
    said before any run."""
    backend = model["backend"]
    gateway = backend in models.GATEWAY_BACKENDS
    rules = [("upstream", gateway, "openai or litellm"), ("prices", gateway, "openai or litellm"),
             ("provider_model", backend == "litellm", "litellm"), ("key_env", backend == "litellm", "litellm")]
    for key, allowed, which in rules:
        if model[key] is not None and not allowed:
            raise BadInput(f"{source}: $.model.{key} is read only by backend {which}, not {backend} "
                           "(rule: model keys match the backend)")
    if backend == "litellm" and model["provider_model"] is None and model["upstream"] is None:
        raise BadInput(f"{source}: $.model.provider_model is required for backend litellm (LiteLLM's provider/model, "
                       "e.g. ollama/qwen3:8b) (rule: model keys match the backend)")


def _model(model: Mapping[str, Any]) -> ModelParams:
    prices = model["prices"]
    return ModelParams(**{**model, "prices": None if prices is None else
                          (prices["input"], prices["cached_input"], prices["output"])})


def _typed(cls: type[T], values: Mapping[str, Any]) -> T:
    """A section dataclass from validated values: lists become tuples, mappings read-only, floats floats."""
    out = {}
    for f in fields(cls):  # type: ignore[arg-type]
        value = values[f.name]
        if isinstance(value, list):
            value = tuple(value)
        elif isinstance(value, dict):
            value = MappingProxyType(dict(value))
        elif f.type in ("float", "float | None") and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        out[f.name] = value
    return cls(**out)


def _check_plain(value: Any, source: str, path: str = "$") -> None:
    """YAML can say things JSON cannot: non-string keys, NaN, infinities, dates. Refuse them by key path."""
    if isinstance(value, dict):
        for key, sub in value.items():
            if not isinstance(key, str):
                raise BadInput(f"{source}: {path}: key {key!r} is not a string (rule: string keys)")
            _check_plain(sub, source, f"{path}.{key}")
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            _check_plain(sub, source, f"{path}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise BadInput(f"{source}: {path}: {value} is not a finite number (rule: finite numbers)")
    elif not (value is None or isinstance(value, (str, int, float, bool))):
        raise BadInput(f"{source}: {path}: {value!r} is a {type(value).__name__}, not a JSON value "
                       "(quote it) (rule: plain values)")


def section(cls: type[T], name: str, values: Mapping[str, Any], source: str, *,
            gate: Mapping[str, Any] | None = None) -> T:
    """One section on its own (a promotion's embedded policy, a test's limits), defaults filled, validated. The
    sampling section's looks take the gate's knobs from `gate` (its defaults when None)."""
    _check_plain(dict(values), source, "$")
    _check_retired(name, values, source, "$")
    filled = fill_defaults(dict(values), load_schema(SCHEMA)["$defs"][name], load_schema(SCHEMA))
    validate(filled, SCHEMA, source, definition=name)
    if cls is SamplingParams:
        return _sampling(filled, asdict(section(Policy, "gate", gate or {}, source)))  # type: ignore[return-value]
    return _typed(cls, filled)


LOOKS_READ_FROM_GATE = ("metric", "alpha", "min_improvement_pct", "max_resolution_drop_pct", "min_total_runs")


def _sampling(filled: Mapping[str, Any], gate: Mapping[str, Any]) -> SamplingParams:
    """The looks test what the gate will: its knobs, read from the gate's section, never kept twice."""
    looks = {**filled["sequential"], **{key: gate[key] for key in LOOKS_READ_FROM_GATE}}
    return _typed(SamplingParams, {**filled, "sequential": _typed(SequentialParams, looks),
                                   "cost_cap": _typed(CostCap, filled["cost_cap"])})


# Keys older versions read, by section (a nested section as "sampling.sequential"): refused by name with what to do
RETIRED_KEYS = {
    "gate": {"quality_promotion_alpha": "a promotion now makes one claim, cheaper per resolved task, and resolution "
                                        "only guards it; remove the key (docs/gate.md, claims)"},
    "sampling.sequential": {key: f"the looks test the gate's own gate.{key}; remove the key here and set gate.{key}"
                            for key in LOOKS_READ_FROM_GATE},
}


def _check_retired(name: str, values: Any, source: str, path: str) -> None:
    """Keys an older version read in section `name` (at `path`): refused by name, with what to do, before the schema
    calls them unknown."""
    for where, keys in RETIRED_KEYS.items():
        head, _, rest = where.partition(".")
        if head != name:
            continue
        found, at = values, path
        if rest:
            found, at = values.get(rest) if isinstance(values, Mapping) else None, f"{path}.{rest}"
        for key, hint in keys.items():
            if isinstance(found, Mapping) and key in found:
                raise BadInput(f"{source}: {at}.{key}: this key is retired: {hint} (rule: current params)")


def _normalise_family(filled: dict[str, Any]) -> None:
    """The one normal form of the family's directories (layout.repo_dir), in place, before anything uses them."""
    family = filled.get("skills")
    paths = family.get("paths") if isinstance(family, dict) else None
    if not isinstance(paths, dict):
        return  # validation names what is wrong
    if isinstance(paths.get("skills"), str):
        paths["skills"] = layout.repo_dir(paths["skills"])
    if isinstance(paths.get("mirrors"), list):
        paths["mirrors"] = [layout.repo_dir(m) if isinstance(m, str) else m for m in paths["mirrors"]]


def parse(doc: Any, source: str = "params.yaml", *, today: date | None = None) -> Params:
    """Typed params from a parsed document; BadInput names `source`, the key path and the rule."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise BadInput(f"{source}: must be a mapping of sections (rule: params.yaml shape)")
    _check_plain(doc, source)
    for name in sorted({where.partition(".")[0] for where in RETIRED_KEYS}):
        _check_retired(name, doc.get(name), source, f"$.{name}")
    filled = fill_defaults(doc, load_schema(SCHEMA))
    _normalise_family(filled)
    validate(filled, SCHEMA, source)
    paths = filled["skills"]["paths"]
    if paths["skills"] in paths["mirrors"]:
        raise BadInput(f"{source}: $.skills.paths.mirrors: {paths['skills']!r} is the canonical directory itself "
                       "(rule: a mirror is another directory)")
    today = today or datetime.now(UTC).date()
    _check_model(filled["model"], source)
    model = filled["model"]
    backend, priced = model["backend"], model["prices"] is not None
    notes = [*models.check_id(model["name"], f"{source}: model.name", today, backend, priced)]
    if filled["propose"]["model"] is not None:
        notes += models.check_id(filled["propose"]["model"], f"{source}: propose.model", today, backend, priced)
    arms = {name: Arm(name, name, tuple(Session(s["skill"], s["prompt"], None if s["writes"] is None else
                                                tuple(s["writes"])) for s in spec["sessions"]),
                      tuple(McpServer(n, m["command"], tuple(m["args"]), m["dir"])
                            for n, m in sorted(spec["mcp"].items())),
                      None if spec["comparator"] is None else Comparator(**spec["comparator"]))
            for name, spec in sorted(filled["arms"].items())}
    check_shapes(arms, source)
    skills = filled["skills"]
    return Params(
        source=source,
        model=_model(filled["model"]),
        skills=SkillsParams(tuple(skills["evolvable"]), skills["paths"]["skills"], tuple(skills["paths"]["mirrors"]),
                            frozenset(skills["frontmatter_keys"]), skills["root"]),
        tasks=_typed(TasksParams, filled["tasks"]),
        evidence=_typed(EvidenceParams, filled["evidence"]),
        propose=_typed(ProposeParams, filled["propose"]),
        arms=MappingProxyType(arms),
        bench=_typed(BenchParams, {**filled["bench"], "limits": Limits(**filled["bench"]["limits"])}),
        gate=_typed(Policy, filled["gate"]),
        simulator=_typed(SimulatorParams, filled["simulator"]),
        sampling=_sampling(filled["sampling"], filled["gate"]),
        notes=tuple(notes),
    )


def load(path: str | Path = "params.yaml", *, today: date | None = None, skills: str | None = None,
         mirrors: list[str] | None = None) -> Params:
    """params.yaml from disk: bounded, capped YAML, then parse().

    `skills` and `mirrors` are the family's directories as dvc.yaml passes them (from `skills.paths`); they take
    the place of that section and pass the same checks.
    """
    doc = documents.load_yaml(path, what="params file", max_bytes=MAX_PARAMS_BYTES)
    if (skills is not None or mirrors is not None) and isinstance(doc, dict):
        family = doc.setdefault("skills", {})
        paths = family.setdefault("paths", {}) if isinstance(family, dict) else None
        if isinstance(paths, dict):
            paths.update({k: v for k, v in (("skills", skills), ("mirrors", mirrors)) if v is not None})
    return parse(doc, str(path), today=today)


def evidence_limits(**overrides: Any) -> EvidenceParams:
    """The `evidence:` section with the schema's defaults, for callers that build a bundle without params.yaml."""
    return section(EvidenceParams, "evidence", overrides, "evidence limits")
