"""`skillevo check` states the price of a generation before anything is paid (issue 32, item 5): sessions from the plan,
minutes and dollars per session from the incumbent side's own rows on this model, else a stated prior."""

from __future__ import annotations

import json

from skillevo.core import config, price
from tests.bench_fixtures import params_doc


def _params(**model):
    doc = params_doc(runs=10)
    doc["sampling"].update(incumbent_runs=4, runs=20)
    doc["bench"]["workers"] = 2
    if model:
        doc["model"].update(model)
    return config.parse(doc)


def test_the_plans_sessions_are_counted_per_side():
    p = _params()
    found = price.price(p, incumbent_tasks=4, gate_tasks=3)
    per_run = sum(len(a.sessions) for a in p.arms.values())  # workflow 2, auto 1, baseline 1
    assert per_run == 4
    assert found.incumbent == 4 * 4 * per_run
    paired = 3  # workflow's two sessions and auto's one: the baseline gets no candidate
    assert found.candidate_max == 3 * 20 * 2 * paired  # each candidate cell beside its control
    assert found.candidate_first == 3 * 6 * 2 * paired  # the first look: sampling.sequential.first
    assert found.simulated and "a prior" in found.source and found.usd == 0
    lines = found.lines()
    assert lines[0].startswith("price: the incumbent side: 64 sessions, about 3 min at 2 worker(s), no money")
    assert "at most 360 sessions" in lines[1] and "first look with 108 sessions" in lines[1]


def test_a_measured_incumbent_side_prices_the_session_and_a_real_model_is_in_dollars(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    p = _params(backend="anthropic")
    rows = tmp_path / "results.jsonl"
    mine = {"model": p.model.name, "backend": "anthropic"}
    rows.write_text("\n".join(json.dumps(r) for r in [
        {**mine, "cost_usd": 0.6, "phases": {"sessions_s": [100.0, 140.0]}},  # two sessions
        {**mine, "cost_usd": 0.3, "phases": {"sessions_s": [60.0]}},
        {**mine, "cost_usd": None, "phases": {"sessions_s": [999.0]}},  # unmeasured: not a price
        {"model": "other", "backend": "anthropic", "cost_usd": 50.0, "phases": {"sessions_s": [1.0]}},
    ]) + "\n")
    found = price.price(p, incumbent_tasks=2, gate_tasks=1, rows_file=rows)
    assert (round(found.usd, 6), found.seconds) == (0.3, 100.0) and "the mean of 3 session(s)" in found.source
    lines = found.lines()
    assert "32 sessions, about 27 min at 2 worker(s), about $9.60" in lines[0]  # 2 tasks x 4 runs x 4 sessions
    assert price.price(p, 2, 1, rows_file=tmp_path / "none.jsonl").usd == price.PRIOR_REAL[0]  # nothing measured


def test_a_bench_side_states_its_sessions_before_its_first_cell():
    p = _params()
    line = price.side_line(90, p, None)
    assert line.startswith("at most 90 sessions, about 4 min at 2 worker(s), no money (simulated)"), line
    assert "served cells cost nothing" in line
