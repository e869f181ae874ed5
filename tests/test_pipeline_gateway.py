"""OpenAI's path offline, as a user runs it: a fresh clone, `make demo BACKEND=openai`. Every stage that talks to a
model (the incumbent bench, the proposer, the candidate bench) goes through the real CLI in bwrap, the relay and
the real LiteLLM proxy to the simulator answering in OpenAI's dialect; the generation promotes as the Anthropic
path does, every row priced from its usage at the pinned OpenAI table (at the test size of test_pipeline.py)."""

from __future__ import annotations

import json

import pytest

from skillevo.core import models, pins
from tests.test_pipeline import make, small_demo
from tests.worktree import clone_of_worktree

pytestmark = [pytest.mark.cli, pytest.mark.bwrap, pytest.mark.gateway, pytest.mark.timeout(2400)]


def test_a_fresh_clone_promotes_through_the_openai_gateway_offline(tmp_path):
    clone = clone_of_worktree(tmp_path / "clone")
    small_demo(clone)
    output = make(clone, "demo", "BACKEND=openai")
    assert "model.backend simulator -> openai" in output and "decision: promote" in output, output[-3000:]
    promotion = json.loads((clone / "results/gate/promotion.json").read_text())
    assert promotion["backend"]["backend"] == "openai" and promotion["backend"]["upstream"] == "simulator"
    assert [(d["candidate_arm"], d["decision"]) for d in promotion["decisions"]] == [("candidate_auto", "promote")]
    prices = pins.OPENAI_MODELS["gpt-5-mini"][1:]
    for side in ("incumbent", "candidate"):
        rows = [json.loads(line) for line in (clone / f"results/bench-{side}/results.jsonl").read_text().splitlines()]
        assert rows and all(r["backend"] == "openai" and r["served_models"] == ["gpt-5-mini"] for r in rows)
        assert all(r["cost_usd"] == models.price(r, "", prices) for r in rows if r["cost_usd"] is not None)
    session = json.loads((clone / "results/proposal/session.json").read_text())
    assert session["ok"] and session["cost_usd"] == models.price(session, "", prices)
    assert "through skillevo's LiteLLM gateway to `simulator`" in (clone / "results/gate/report.md").read_text()
