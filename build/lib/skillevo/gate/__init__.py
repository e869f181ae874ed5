"""The gate: a deterministic, conservative promotion decision per candidate arm, bound into promotion.json."""

from skillevo.gate.policy import decide, decide_arm
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
    "PromotionRefused",
    "build_promotion",
    "decide",
    "decide_arm",
    "load_freeze",
    "pipeline_bindings",
    "recompute_decisions",
    "validate_for_apply",
    "write_outputs",
    "write_promotion",
]
