"""The statistics the gate decides with: one module per test, each a pure function with a stated error rate.

- per_resolved: the default cost test, the candidate's metric per resolved task relative to the incumbent's
  (what a team pays), bootstrap-t calibrated;
- geometric: the geometric-mean t-test on log cost per run, kept for comparison;
- resolution: the pooled resolution drop's bound and the stratified tests for a decrease or an increase;
- looks: the levels of a sequential candidate side's planned looks (alpha spending);
- power: what a sampling plan can detect, for the preflight.

scipy is imported inside the functions that use it: a stage that refuses its input or never tests pays nothing
for it (about 0.7 s of every `python -m skillevo.stages.*` before).
"""

from skillevo.stats.estimate import Estimate, bound_text, improvement_text, interval, p_text, significant
from skillevo.stats.geometric import log_ratio
from skillevo.stats.looks import LOOK_BOUNDARIES, look_fractions, look_levels, spent
from skillevo.stats.per_resolved import per_resolved, per_resolved_at
from skillevo.stats.power import (
    detectable_improvement_pct,
    detectable_per_resolved_pct,
    per_resolved_variance,
    runs_for_saving,
)
from skillevo.stats.resolution import Quality, quality, runs_to_bound_drop

__all__ = ["LOOK_BOUNDARIES", "Estimate", "Quality", "bound_text", "detectable_improvement_pct",
           "improvement_text",
           "detectable_per_resolved_pct", "interval", "log_ratio", "look_fractions", "look_levels", "per_resolved",
           "per_resolved_at", "per_resolved_variance", "quality", "p_text", "runs_for_saving", "runs_to_bound_drop",
           "significant", "spent"]
