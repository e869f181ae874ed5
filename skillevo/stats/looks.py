"""Sequential candidate runs: the level of each planned look, so that a test stopped at any look keeps alpha
whatever stopped it (docs/gate.md, sequential runs). Lan-DeMets O'Brien-Fleming-type spending, either at the
exact group-sequential boundaries (Armitage-McPherson-Rowe recursive integration) or Bonferroni's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

LOOK_BOUNDARIES = ("spending", "bonferroni")  # params gate.look_boundary


def look_fractions(looks: Sequence[int]) -> tuple[float, ...]:
    """The information at each look relative to the last, when the candidate has looks[j] runs per task and the
    incumbent always runs looks[-1]: a look's difference of means has variance (1/n_j + 1/N) sigma^2, so with
    the incumbent shared the looks' statistics have the canonical correlation sqrt(t_i / t_j) at these t."""
    if not looks or any(n < 1 for n in looks) or any(b <= a for a, b in zip(looks, looks[1:], strict=False)):
        raise ValueError(f"looks must be increasing positive run counts, not {list(looks)}")
    last = looks[-1]
    return tuple(2 * n / (n + last) for n in looks)


def spent(fraction: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type spending, one-sided: what of `alpha` may be spent by `fraction` of the
    planned candidate runs (all of it at 1). Early looks get almost none, so the last keeps nearly the fixed
    level. Spending on the run fraction rather than the information (look_fractions, which the shared incumbent
    pushes towards 1 from the first look) is one more pre-planned time scale: it keeps alpha just as well."""
    from scipy import special  # the normal's sf and isf as scipy.stats.norm computes them, without importing it
    if fraction >= 1:
        return alpha
    return float(2 * special.ndtr(special.ndtri(alpha / 2) / math.sqrt(fraction)))


def look_levels(looks: Sequence[int], alpha: float, boundary: str = "spending") -> tuple[float, ...]:
    """The nominal one-sided level of each planned look: a test that rejects at look j when its p-value is at
    or below levels[j] rejects at some look with probability at most alpha under the null, however the looks
    are stopped (docs/gate.md, sequential runs).

    `spending`: exact group-sequential boundaries for O'Brien-Fleming-type spending (spent) under the canonical
    joint normal law of the looks at their information fractions (look_fractions; Armitage-McPherson-Rowe
    recursive integration), so together the looks spend exactly alpha. `bonferroni`: each look at the alpha
    spent there, which sums to alpha for any correlation between the looks and so needs no model of it, at
    some cost in power."""
    if boundary not in LOOK_BOUNDARIES:
        raise ValueError(f"unknown look boundary {boundary!r}")
    return _look_levels(tuple(int(n) for n in looks), float(alpha), boundary)


@lru_cache(maxsize=256)
def _look_levels(looks: tuple[int, ...], alpha: float, boundary: str) -> tuple[float, ...]:
    from scipy import special
    fractions = look_fractions(looks)
    cumulative = [spent(n / looks[-1], alpha) for n in looks]
    increments = [b - a for a, b in zip([0.0, *cumulative], cumulative, strict=False)]
    if boundary == "bonferroni" or len(looks) == 1:
        return tuple(max(0.0, a) for a in increments)
    return tuple(float(special.ndtr(-c)) for c in _boundaries(fractions, increments))


_SPAN = 8.0  # standard deviations of the Brownian path kept below the boundary; beyond it the mass is < 1e-15
_NO_BOUNDARY = 40.0  # a look that may spend nothing never rejects


def _boundaries(fractions: Sequence[float], increments: Sequence[float]) -> list[float]:
    """z-boundaries c_j with P(first crossing at look j) = increments[j] for Brownian motion B observed at the
    fractions (Z_j = B(t_j) / sqrt(t_j)): the density of B on the continuation region is carried from look to
    look on a grid (Simpson weights) and each boundary is solved for in turn."""
    from scipy import optimize, special
    bounds: list[float] = []
    grid: np.ndarray | None = None  # None before the first look; weights and density are grid's
    weights = density = np.empty(0)
    previous = 0.0
    for t, target in zip(fractions, increments, strict=True):
        step = t - previous
        sd = math.sqrt(step)
        if grid is None:
            bound = _NO_BOUNDARY if target <= 0 else float(-special.ndtri(target))
        else:
            mass = weights * density

            def crossing(c: float, t: float = t, sd: float = sd, mass: np.ndarray = mass, grid: np.ndarray = grid
                         ) -> float:
                return float(mass @ special.ndtr((grid - c * math.sqrt(t)) / sd))

            if target <= 0 or crossing(_NO_BOUNDARY) >= target:
                bound = _NO_BOUNDARY
            else:
                bound = float(optimize.brentq(lambda c, target=target: crossing(c) - target,
                                              -_NO_BOUNDARY, _NO_BOUNDARY, xtol=1e-10, rtol=1e-12))
        bounds.append(bound)
        top = min(bound * math.sqrt(t), _SPAN * math.sqrt(t))
        h = min(0.05, sd / 12)
        points = max(3, 2 * math.ceil((top + _SPAN * math.sqrt(t)) / (2 * h)) + 1)
        new_grid = np.linspace(-_SPAN * math.sqrt(t), top, points)
        if grid is None:
            new_density = _pdf(new_grid / sd) / sd
        else:
            kernel = _pdf((new_grid[:, None] - grid[None, :]) / sd) / sd
            new_density = kernel @ (weights * density)
        spacing = new_grid[1] - new_grid[0]
        new_weights = np.full(points, 2.0)
        new_weights[1::2] = 4.0
        new_weights[0] = new_weights[-1] = 1.0
        grid, weights, density, previous = new_grid, new_weights * spacing / 3, new_density, t
    return bounds



def _pdf(x: np.ndarray) -> np.ndarray:
    """The standard normal density, as scipy.stats.norm.pdf computes it, without its per-call argument checks
    (they took a third of the boundaries' time on 43 looks' grids)."""
    density: np.ndarray = np.exp(-x**2 / 2.0) / math.sqrt(2 * math.pi)
    return density
