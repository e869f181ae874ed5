"""The gate: a deterministic, conservative promotion decision per candidate arm, bound into promotion.json."""

from skillevo.gate._schema import GateInputError
from skillevo.gate.aggregate import Side, aggregate, load_side
from skillevo.gate.policy import Policy, decide, decide_arm, load_policy
from skillevo.gate.promotion import (
    PromotionRefused,
    build_promotion,
    load_freeze,
    pipeline_bindings,
    recompute_decisions,
    validate_for_apply,
    write_promotion,
)
from skillevo.gate.report import write_outputs

__all__ = [
    "GateInputError",
    "Policy",
    "PromotionRefused",
    "Side",
    "aggregate",
    "build_promotion",
    "decide",
    "decide_arm",
    "load_freeze",
    "load_policy",
    "load_side",
    "pipeline_bindings",
    "recompute_decisions",
    "validate_for_apply",
    "write_outputs",
    "write_promotion",
]
