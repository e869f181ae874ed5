"""Model latency for the offline simulator: how long a real model would take to answer each request.

The simulator answers as fast as it can compute a reply, so a bench against it is CPU-bound and says nothing
about how cells overlap while they wait on the model, which is what real cells mostly do. A profile states a
time to first token and an output speed; the server holds each Messages reply back by them (streaming: the
first token after the TTFT, the rest at the rate). Latency changes wall times only: usage, and so cost, comes
from the bytes of the request and the reply, never from the clock. Figures and sources: docs/simulator.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from skillevo.simulator import noise


@dataclass(frozen=True)
class Latency:
    """One latency profile. `jitter_sigma` is the sd of the log of a per-request factor (lognormal, mean 1) on
    both the TTFT and the time per token, drawn from (seed, cell key, request) so it is the same in any run
    order; 0 gives every request exactly the stated figures."""

    name: str
    ttft_s: float
    output_tokens_per_s: float
    jitter_sigma: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.ttft_s) and self.ttft_s >= 0):
            raise ValueError(f"latency {self.name}: ttft_s must be a finite number >= 0, not {self.ttft_s!r}")
        if not (math.isfinite(self.output_tokens_per_s) and self.output_tokens_per_s > 0):
            raise ValueError(f"latency {self.name}: output_tokens_per_s must be a finite number > 0, "
                             f"not {self.output_tokens_per_s!r}")
        if not (math.isfinite(self.jitter_sigma) and 0 <= self.jitter_sigma <= 1):
            raise ValueError(f"latency {self.name}: jitter_sigma must be in [0, 1], not {self.jitter_sigma!r}")

    def pace(self, cell: str, request: int, output_tokens: int) -> tuple[float, float]:
        """(seconds before the first token, seconds over which the output tokens follow) for one reply;
        `request` is its place in the conversation, so the CLI's retry of a request waits as the first try did."""
        factor = noise.lognormal(self.jitter_sigma, "latency", self.seed, cell, request)
        return self.ttft_s * factor, output_tokens / self.output_tokens_per_s * factor

    def describe(self) -> str:
        return (f"{self.name} (ttft {self.ttft_s:g}s, {self.output_tokens_per_s:g} output tokens/s, "
                f"jitter sigma {self.jitter_sigma:g}, seed {self.seed})")


# Claude Sonnet 4.6 as a benchmark site measured it on Anthropic's API (docs/simulator.md, "Model latency").
SONNET_4_6 = Latency("sonnet-4-6", ttft_s=1.2, output_tokens_per_s=86.0, jitter_sigma=0.2)
PROFILES = {p.name: p for p in (SONNET_4_6,)}
