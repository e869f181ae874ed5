"""The chance of any false promotion over a whole evolution (`make evolve`), stated and kept within gate.family_alpha.

One gate decision is wrong at most gate.alpha of the time; an evolution makes dozens, so "5% per decision" says
little about the run. evolve promotes only when a fresh replicate of both sides (new sessions, new noise: cell keys
carry the replicate) promotes the same frozen candidate again. For a candidate that is not cheaper, each of the two
tests promotes at most alpha of the time on its own runs, whatever came before it, so a generation ends in a false
promotion at most alpha_first x alpha_confirm of the time. By the union bound, which needs no independence between
generations (they share the incumbent side and the memory), an evolution of generations g = 1..n ends in any false
promotion at most the sum of those products. That sum is the family's spent budget: evolve runs a generation only
while spent + alpha^2 stays within gate.family_alpha (0.05 at gate.alpha 0.05: 20 generations), and every report
shows what is left. A no_proposal generation tests nothing and spends nothing. `make gate-study` measures the rate
over 20-generation runs of null candidates through the gate's own code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

TOLERANCE = 1e-12  # float sums of alpha^2: 20 x 0.0025 must fit 0.05


def per_generation(alpha: float, confirm_alpha: float | None = None) -> float:
    """The most often one generation ends in a false promotion: its test and its confirmation on fresh runs."""
    return alpha * (alpha if confirm_alpha is None else confirm_alpha)


@dataclass(frozen=True)
class Budget:
    family_alpha: float
    spent: float
    generations: int  # generations that tested a candidate (no_proposal ones spend nothing)

    @property
    def left(self) -> float:
        return max(0.0, self.family_alpha - self.spent)

    def allows(self, alpha: float) -> bool:
        """Whether one more generation at `alpha` (confirmed at the same) keeps the family within its level."""
        return self.spent + per_generation(alpha) <= self.family_alpha + TOLERANCE

    def line(self) -> str:
        return (f"family error budget: {self.spent:.4g} of gate.family_alpha {self.family_alpha:g} spent over "
                f"{self.generations} tested generation(s), {self.left:.4g} left (each spends gate.alpha squared: "
                "its test and its confirmation on a fresh replicate)")


def budget(family_alpha: float, tested: Iterable[float]) -> Budget:
    """The budget after generations that tested a candidate at each of these gate.alpha levels."""
    levels = list(tested)
    return Budget(family_alpha, sum(per_generation(a) for a in levels), len(levels))


def horizon(family_alpha: float, alpha: float) -> int:
    """How many tested generations the family allows at one alpha."""
    return int((family_alpha + TOLERANCE) // per_generation(alpha))
