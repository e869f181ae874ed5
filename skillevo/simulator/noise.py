"""Run-to-run noise for the offline simulator: what differs between two runs of the same cell.

A real agent never runs a task the same way twice; a simulator that does would never exercise the gate's
statistics. Every draw here is a pure function of (seed, replicate, cell key, what is drawn, index) through
SHA-256, so a cell's noise is the same in any process, on any machine and in any order of execution, and a
new seed or replicate gives independent noise. The `none` profile draws nothing: every run of an arm is
identical. Figures and their sources: docs/simulator.md.

A bench may also name its measuring moment and each cell's slot in its schedule (route()): what threatens a
decision across time. A moment's drift (how much work the agent does that day) and its cache windows (warm or
cold) are drawn from (seed, replicate, moment[, window]), shared by every cell of the moment, never by the cell.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Any

ROUTE = "cell"  # base URL path segment that names the cell and session: /cell/<key>
MOMENT = "moment"  # /moment/<moment_key(name)>: the measuring moment a session belongs to (a bench's identity)
SLOT = "slot"  # /slot/<n>: the cell's position in its moment's schedule
MODE = "mode"  # /mode/<mode>: a behaviour or a fault of the simulator (server.MODES)
KEY = re.compile(r"^[0-9a-f]{32}$")
_SLOT = re.compile(r"^(0|[1-9][0-9]{0,8})$")  # canonical decimal below 10**9: one spelling per slot
MAX_SLOT = 10 ** 9 - 1
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
    # Across time (only for sessions whose route names a moment, and a slot for the cache windows):
    drift_sigma: float = 0.0  # sd of the log of a moment's work factor (lognormal, mean 1) on prose and extra calls
    warm_rate: float = 0.0  # P(a cache window finds the shared tools-and-system prefix already cached)
    window: int = 0  # consecutive slots of a moment's schedule that share one cache state (0: no clustering)

    @property
    def draws(self) -> bool:
        """Whether anything is drawn at all; a playbook's effects (retry loops, give-ups) fire only then, so `none`
        stays exact whatever a skill says."""
        return any((self.verbosity_sigma, self.extra_calls_mean, self.mistake_rate, self.skip_skill_rate,
                    self.overload_rate, self.drift_sigma, self.warm_rate))


NONE = Profile("none", verbosity_sigma=0.0, narration_chars=0, extra_calls_mean=0.0, mistake_rate=0.0,
               skip_skill_rate=0.0, overload_rate=0.0)
# Mild: cost varies run to run, quality never does, so the demo's known-better candidate still wins.
DEMO = Profile("demo", verbosity_sigma=0.15, narration_chars=200, extra_calls_mean=0.2, mistake_rate=0.0,
               skip_skill_rate=0.0, overload_rate=0.01)
REALISTIC = Profile("realistic", verbosity_sigma=0.5, narration_chars=600, extra_calls_mean=1.5, mistake_rate=0.08,
                    skip_skill_rate=0.04, overload_rate=0.01)
# Realistic, and across time: a moment's drift and cache windows warm or cold (docs/simulator.md, "Across time").
DRIFTING = replace(REALISTIC, name="drifting", drift_sigma=0.2, warm_rate=0.5, window=16)
PROFILES = {p.name: p for p in (NONE, DEMO, REALISTIC, DRIFTING)}


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


# cells, moments and routes ------------------------------------------------------------------------
def cell_key(task: str, arm: str, run: int, session: int) -> str:
    """The opaque key of one session of one cell; the bench puts it in the session's base URL (route())."""
    ident = json.dumps(["skillevo-cell", task, arm, run, session], separators=(",", ":"))
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def moment_key(moment: str) -> str:
    """The opaque key of a measuring moment (the bench's identity); only its digest travels in the route."""
    if not isinstance(moment, str) or not moment:
        raise ValueError(f"a moment is a non-empty name, not {moment!r}")
    return hashlib.sha256(json.dumps(["skillevo-moment", moment], separators=(",", ":")).encode()).hexdigest()[:32]


ROUTE_HEADER = "x-skillevo-route"  # the route behind a gateway, which keeps no path: added by the host-side relay


def route(task: str, arm: str, run: int, session: int, *, moment: str | None = None, slot: int | None = None) -> str:
    """The base URL path that tells the simulator which cell and session a request belongs to, and when given, the
    measuring moment and the cell's slot in that moment's schedule: /cell/<key>[/moment/<key>[/slot/<n>]]. The
    host-side relay prepends it to every request, so nothing inside the sandbox can choose another cell's noise."""
    path = f"/{ROUTE}/{cell_key(task, arm, run, session)}"
    if slot is not None and moment is None:
        raise ValueError("a slot is a place in a moment's schedule: pass the moment too")
    if moment is not None:
        path += f"/{MOMENT}/{moment_key(moment)}"
    if slot is not None:
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot <= MAX_SLOT:
            raise ValueError(f"a slot is an integer in 0..{MAX_SLOT}, not {slot!r}")
        path += f"/{SLOT}/{slot}"
    return path


class RouteError(ValueError):
    """A base URL path the simulator refuses; the message names the rule."""


@dataclass(frozen=True)
class Route:
    """What a request's path says: its mode, cell key ("" for none), moment key and slot, and the API path."""

    mode: str = "normal"
    cell: str = ""
    moment: str | None = None
    slot: int | None = None
    api: str = "/"


def parse_route(path: str) -> Route:
    """Read [/cell/<key>][/moment/<key>][/slot/<n>][/mode/<mode>] (any order, each at most once) then the API path.
    Anything route() would not write is refused, never guessed: a malformed key or slot, a segment given twice,
    a moment without a cell, a slot without a moment."""
    found: dict[str, str] = {}
    while len(parts := path.split("/", 3)) == 4 and parts[0] == "" and parts[1] in (ROUTE, MOMENT, SLOT, MODE):
        if parts[1] in found:
            raise RouteError(f"the route names /{parts[1]}/ twice")
        found[parts[1]], path = parts[2], "/" + parts[3]
    if ROUTE in found and not KEY.match(found[ROUTE]):
        raise RouteError("a cell route is /cell/<32 hex digits>")
    if MOMENT in found and not KEY.match(found[MOMENT]):
        raise RouteError("a moment is /moment/<32 hex digits> (noise.moment_key)")
    if MOMENT in found and ROUTE not in found:
        raise RouteError("a moment belongs to a cell's session: /cell/<key>/moment/<key>")
    if SLOT in found and not _SLOT.match(found[SLOT]):
        raise RouteError(f"a slot is /slot/<n>, n in 0..{MAX_SLOT} in decimal without leading zeros")
    if SLOT in found and MOMENT not in found:
        raise RouteError("a slot is a place in a moment's schedule: /moment/<key>/slot/<n>")
    return Route(found.get(MODE, "normal"), found.get(ROUTE, ""), found.get(MOMENT),
                 int(found[SLOT]) if SLOT in found else None, path)


@dataclass(frozen=True)
class SessionNoise:
    """The draws of one session. Behaviour (prose, extra calls, a mistake, a skipped skill, a playbook effect) is
    fixed per session; overloads are drawn per request attempt; drift and cache windows per moment."""

    profile: Profile
    parts: tuple[object, ...]  # (seed, replicate, cell key[, moment key]): what every draw of this session starts from
    moment: str | None = None  # the measuring moment's key, when the route names one
    slot: int | None = None  # the cell's place in the moment's schedule, when the route names one
    spread: float = 1.0  # a skill's `spread` effect: the factor on this session's spread (agent.affected)

    def _draw(self, what: str, *index: object) -> tuple[object, ...]:
        return (*self.parts, what, *index)

    def _moment(self, what: str, *index: object) -> tuple[object, ...]:
        """The parts of a draw every session of the moment shares: seed, replicate and moment, never the cell."""
        return (*self.parts[:2], what, self.moment, *index)

    @property
    def drift(self) -> float:
        """How much work the agent does at this moment, a factor on its prose and on its mean of extra calls:
        one lognormal draw (mean 1) per (seed, replicate, moment); 1 when the route names no moment."""
        return 1.0 if self.moment is None else lognormal(self.profile.drift_sigma, *self._moment("drift"))

    @property
    def warm(self) -> bool:
        """Whether this session's cache window (slot // window of its moment) finds the shared tools-and-system
        prefix already cached, as a neighbouring session would have left it; never without a slot or a window."""
        if self.slot is None or self.profile.window <= 0:
            return False
        return bernoulli(self.profile.warm_rate, *self._moment("warm", self.slot // self.profile.window))

    @property
    def verbosity(self) -> float:
        return lognormal(self.profile.verbosity_sigma * self.spread, *self._draw("verbosity"))

    @property
    def narration_chars(self) -> int:
        return round(self.profile.narration_chars * self.verbosity * self.drift)

    @property
    def skips_skill(self) -> bool:
        return bernoulli(self.profile.skip_skill_rate, *self._draw("skip-skill"))

    @property
    def mistake(self) -> bool:
        return bernoulli(self.profile.mistake_rate, *self._draw("mistake"))

    @property
    def extra_calls(self) -> int:
        """Poisson around the drifted mean m. A spread f > 1 mixes m with a lognormal factor (mean 1) whose variance
        makes the count's sd f times the Poisson's, sqrt(m), and keeps its mean m."""
        mean = self.profile.extra_calls_mean * self.drift
        if self.spread > 1 and mean > 0:
            mean *= lognormal(math.sqrt(math.log1p((self.spread ** 2 - 1) / mean)), *self._draw("extra-spread"))
        return poisson(mean, *self._draw("extra-calls"))

    def pick(self, what: str, i: object, n: int) -> int:
        """A uniform choice among n things (where extra call i goes, which file it looks at, how)."""
        return min(n - 1, int(uniform(*self._draw(what, i)) * n)) if n > 0 else 0

    def overloaded(self, request: int, attempt: int) -> bool:
        return bernoulli(self.profile.overload_rate, *self._draw("overload", request, attempt))

    def gives_up(self, instruction: str, rate: float) -> bool:
        """A `give_up` effect of `instruction`: whether this session stops at once; never under a profile that
        draws nothing."""
        return self.profile.draws and bernoulli(rate, *self._draw("give-up", instruction))

    def retry_repeats(self, instruction: str, rate: float, lo: int, hi: int) -> int:
        """A `retry_loop` effect of `instruction`: how many times this session repeats its reading and
        verification (lo..hi, uniform) when it gets stuck, at `rate`; 0 under a profile that draws nothing."""
        if not (self.profile.draws and bernoulli(rate, *self._draw("retry-loop", instruction))):
            return 0
        return lo + self.pick("retry-repeats", instruction, hi - lo + 1)


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

    def session(self, key: str, moment: str | None = None, slot: int | None = None) -> SessionNoise:
        """A session's draws; requests without a cell route share the empty key (deterministic, like any other).
        A moment is part of every draw of its sessions: the same cell measured at two moments is two independent
        sessions, as two days' runs of a real agent are."""
        parts = (self.seed, self.replicate, key) if moment is None else (self.seed, self.replicate, key, moment)
        return SessionNoise(self.profile, parts, moment, slot)

    def provenance(self) -> dict[str, object]:
        """What bench.json records about the noise a side ran under."""
        return {"noise": self.profile.name, "seed": self.seed}
