"""Run-to-run noise for the offline simulator: what differs between two runs of the same cell.

A real agent never runs a task the same way twice; a simulator that does would never exercise the gate's
statistics. Every draw here is a pure function of (seed, replicate, cell key, what is drawn, index) through
SHA-256, so a cell's noise is the same in any process, on any machine and in any order of execution, and a
new seed or replicate gives independent noise. The `none` profile draws nothing: every run of an arm is
identical. Figures and their sources: docs/simulator.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

ROUTE = "cell"  # base URL path segment that names the cell and session: /cell/<key>
KEY = re.compile(r"^[0-9a-f]{32}$")
_NORMAL = NormalDist()
_MAX_POISSON = 64  # a cap far in the tail of any mean used here, so a draw always ends


@dataclass(frozen=True)
class Profile:
    """The figures of one noise profile (params simulator.noise); docs/simulator.md gives each one's source."""

    name: str
    verbosity_sigma: float  # sd of log verbosity per session; prose length x lognormal(mean 1)
    narration_chars: int  # prose before each tool call at verbosity 1 (0: none, the CLI sees bare tool calls)
    extra_calls_mean: float  # Poisson mean of extra exploratory Read/Bash calls per session
    mistake_rate: float  # P(a session takes its task's `mistake` variant), for tasks that declare one
    skip_skill_rate: float  # P(a session goes ahead without invoking the skill it was asked to use)
    overload_rate: float  # P(a request attempt is answered 529 overloaded), at most bench.max_retries times


NONE = Profile("none", verbosity_sigma=0.0, narration_chars=0, extra_calls_mean=0.0, mistake_rate=0.0,
               skip_skill_rate=0.0, overload_rate=0.0)
# Mild: cost varies run to run, quality never does, so the demo's known-better candidate still wins.
DEMO = Profile("demo", verbosity_sigma=0.15, narration_chars=200, extra_calls_mean=0.2, mistake_rate=0.0,
               skip_skill_rate=0.0, overload_rate=0.01)
REALISTIC = Profile("realistic", verbosity_sigma=0.5, narration_chars=600, extra_calls_mean=1.5, mistake_rate=0.08,
                    skip_skill_rate=0.04, overload_rate=0.01)
PROFILES = {p.name: p for p in (NONE, DEMO, REALISTIC)}


# draws ---------------------------------------------------------------------------------------------
def uniform(*parts: object) -> float:
    """A number in (0, 1), fixed by `parts` (JSON values); never 0 or 1, so every inverse CDF is finite."""
    digest = hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).digest()
    return (int.from_bytes(digest[:8], "big") + 0.5) / 2.0 ** 64


def normal(*parts: object) -> float:
    return _NORMAL.inv_cdf(uniform(*parts))


def lognormal(sigma: float, *parts: object) -> float:
    """exp(N(-sigma^2/2, sigma^2)): mean 1, so noise changes the spread of a quantity, never its average."""
    return math.exp(sigma * normal(*parts) - sigma * sigma / 2) if sigma else 1.0


def poisson(mean: float, *parts: object) -> int:
    """By inversion of the CDF at one uniform draw."""
    if mean <= 0:
        return 0
    u, k = uniform(*parts), 0
    p = math.exp(-mean)
    cdf = p
    while u > cdf and k < _MAX_POISSON:
        k += 1
        p *= mean / k
        cdf += p
    return k


def bernoulli(p: float, *parts: object) -> bool:
    return p > 0 and uniform(*parts) < p


# cells and sessions --------------------------------------------------------------------------------
def cell_key(task: str, arm: str, run: int, session: int) -> str:
    """The opaque key of one session of one cell; the bench puts it in the session's base URL (route())."""
    ident = json.dumps(["skillevo-cell", task, arm, run, session], separators=(",", ":"))
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def route(task: str, arm: str, run: int, session: int) -> str:
    """The base URL path that tells the simulator which cell and session a request belongs to. The host-side
    relay prepends it to every request, so nothing inside the sandbox can choose another cell's noise."""
    return f"/{ROUTE}/{cell_key(task, arm, run, session)}"


@dataclass(frozen=True)
class SessionNoise:
    """The draws of one session. Behaviour (prose, extra calls, a mistake, a skipped skill) is fixed per session;
    overloads are drawn per request attempt."""

    profile: Profile
    parts: tuple[object, ...]  # (seed, replicate, cell key): what every draw of this session starts from

    def _draw(self, what: str, *index: object) -> tuple[object, ...]:
        return (*self.parts, what, *index)

    @property
    def verbosity(self) -> float:
        return lognormal(self.profile.verbosity_sigma, *self._draw("verbosity"))

    @property
    def narration_chars(self) -> int:
        return round(self.profile.narration_chars * self.verbosity)

    @property
    def skips_skill(self) -> bool:
        return bernoulli(self.profile.skip_skill_rate, *self._draw("skip-skill"))

    @property
    def mistake(self) -> bool:
        return bernoulli(self.profile.mistake_rate, *self._draw("mistake"))

    @property
    def extra_calls(self) -> int:
        return poisson(self.profile.extra_calls_mean, *self._draw("extra-calls"))

    def pick(self, what: str, i: int, n: int) -> int:
        """A uniform choice among n things (where extra call i goes, which file it looks at, how)."""
        return min(n - 1, int(uniform(*self._draw(what, i)) * n)) if n > 0 else 0

    def overloaded(self, request: int, attempt: int) -> bool:
        return bernoulli(self.profile.overload_rate, *self._draw("overload", request, attempt))


@dataclass(frozen=True)
class Noise:
    """One profile bound to a seed and a replicate: the simulator's source of every session's draws."""

    profile: Profile = NONE
    seed: int = 0
    replicate: int = 0

    @classmethod
    def from_params(cls, simulator: Any, replicate: int) -> Noise:
        """From config.SimulatorParams (noise, seed) and params sampling.replicate."""
        return cls(PROFILES[simulator.noise], simulator.seed, replicate)

    def session(self, key: str) -> SessionNoise:
        """A session's draws; requests without a cell route share the empty key (deterministic, like any other)."""
        return SessionNoise(self.profile, (self.seed, self.replicate, key))

    def provenance(self) -> dict[str, object]:
        """What bench.json records about the noise a side ran under."""
        return {"noise": self.profile.name, "seed": self.seed}
