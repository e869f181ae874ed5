"""The proposer's prediction, held against what the gate measured (docs/gate.md, "The proposer's record").

proposal.md states, on one line of its own, how much cheaper per resolved task it expects the candidate to be on
the gate's tasks (the held-out ones, the only ones both arms run): `Predicted improvement: 12%` (negative: dearer).
Freeze binds the figure in its manifest; the gate scores it against each candidate arm's measured improvement and
its interval:

- hit: the figure lies inside the interval (the data cannot tell it from the truth);
- wrong sign: the interval lies wholly on the other side of zero;
- miss: anything else (the right direction, the wrong size, or an interval that spans zero);
- unmeasured: the gate made no estimate (an arm that resolved nothing, a generation that measured nothing).

A proposal without the line has no prediction (said, never refused); a line that is not exactly one figure in
(-100, 100) is refused, naming the file and the rule: a forecast that cannot be scored is no forecast.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from skillevo.files.errors import BadInput

PREFIX = "Predicted improvement:"
_LINE = re.compile(rf"^[ \t]*{re.escape(PREFIX)}(.*)$", re.M | re.I)
_VALUE = re.compile(r"[ \t]*([+-]?\d{1,2}(?:\.\d{1,2})?)[ \t]*%[ \t]*\.?[ \t]*")
SCORES = ("hit", "miss", "wrong sign", "unmeasured")
RULE = (f"(rule: one line '{PREFIX} <n>%', n in (-100, 100), the cost per resolved task on the gate's tasks, "
        "positive for cheaper)")


def parse(text: str, where: str) -> float | None:
    """The predicted improvement in percent, or None when the proposal makes no prediction."""
    found = _LINE.findall(text)
    if not found:
        return None
    if len(found) > 1:
        raise BadInput(f"{where}: {len(found)} lines start {PREFIX!r}; a proposal makes one prediction {RULE}")
    value = _VALUE.fullmatch(found[0])
    if value is None:
        raise BadInput(f"{where}: {PREFIX} {found[0].strip()[:80]!r} is not one figure in percent {RULE}")
    return float(value.group(1))


def score(predicted: float, estimate: Mapping[str, Any] | None) -> str:
    """How the prediction fared against one arm's estimate (promotion.json's, as rounded there)."""
    if not estimate:
        return "unmeasured"
    low, high = estimate["interval_pct"]
    if low is not None and high is not None and low <= predicted <= high:
        return "hit"
    if (predicted > 0 and high is not None and high < 0) or (predicted < 0 and low is not None and low > 0):
        return "wrong sign"
    return "miss"


def scored(predicted: float | None, decisions: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """promotion.json's `prediction`: the figure and its score per candidate arm; None without a prediction."""
    if predicted is None:
        return None
    return {"improvement_pct": predicted,
            "scores": {d["candidate_arm"]: score(predicted, d.get("estimate")) for d in decisions}}


def line(prediction: Mapping[str, Any] | None) -> str:
    """One sentence for report.md, the gate summary the next proposer reads, and the page."""
    if prediction is None:
        return "The proposer made no prediction (no 'Predicted improvement:' line in proposal.md)."
    scores = "; ".join(f"{arm}: {result}" for arm, result in prediction["scores"].items())
    return (f"The proposer predicted {prediction['improvement_pct']:g}% cheaper per resolved task on the gate's "
            f"tasks; scored against each arm's measured interval: {scores or 'no arm measured'}.")


def record(promotions: Iterable[Mapping[str, Any]]) -> str:
    """The proposer's calibration over generations (`make report`): each scored arm once, generations without a
    prediction counted apart."""
    counts: Counter[str] = Counter()
    silent = 0
    for promotion in promotions:
        if promotion.get("no_proposal") or promotion.get("candidate_origin") != "proposer":
            continue
        prediction = promotion.get("prediction")
        if prediction is None:
            silent += 1
            continue
        counts.update(prediction["scores"].values())
    scored_ = sum(counts[s] for s in SCORES if s != "unmeasured")
    rate = f"{counts['hit'] / scored_:.0%} hits" if scored_ else "nothing scored yet"
    return (f"the proposer's record: {rate} ({', '.join(f'{counts[s]} {s}' for s in SCORES)}); "
            f"{silent} proposal(s) without a prediction")
