"""Each pipeline stage reads only the params it declares, and DVC tracks exactly those (issue 31, item 1).

A key read but not listed in the stage's dvc.yaml entry leaves its outputs stale after `dvc exp run -S key=...`:
the preflight read gate.min_total_runs, gate.min_runs and gate.policy unlisted. The declarations live in the stage
scripts (PARAMS); the guard refuses any other key as it is read (so every stage test run checks the code against
them), and these tests hold dvc.yaml and the template `skillevo init` writes to them.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from skillevo.core import config
from skillevo.core.declared import Declared, UndeclaredParam, covered, guard
from tests.bench_fixtures import ROOT, params_doc

PIPELINES = [ROOT / "dvc.yaml", ROOT / "skillevo/template/pipeline.yaml"]


def _stages(path: Path) -> dict[str, dict]:
    found = {}
    for name, spec in yaml.safe_load(path.read_text())["stages"].items():
        found[name] = spec["do"] if "foreach" in spec else spec
    return found


def _declared(name: str) -> Declared | None:
    return getattr(importlib.import_module(f"skillevo.stages.{name}"), "PARAMS", None)


@pytest.mark.parametrize("pipeline", PIPELINES, ids=["dvc.yaml", "template"])
def test_every_stage_tracks_exactly_the_params_its_script_declares(pipeline):
    stages = _stages(pipeline)
    assert set(stages) >= {"identity", "preflight", "bench", "evidence", "propose", "freeze", "gate", "apply"}
    for name, spec in stages.items():
        declared = _declared(name)
        if spec.get("frozen"):  # apply: DVC never runs it (make apply does), so it tracks nothing
            assert not spec.get("params") and declared is not None and declared.tracked == (), name
            continue
        assert declared is not None, f"{name}: its script declares no PARAMS"
        assert sorted(spec.get("params") or []) == sorted(declared.tracked), name


def test_no_tracked_key_is_also_untracked_and_every_key_exists_in_params():
    doc = config.fill_defaults(params_doc(), config.load_schema(config.SCHEMA))
    for name in ("identity", "preflight", "bench", "evidence", "propose", "freeze", "gate", "apply"):
        declared = _declared(name)
        assert not set(declared.tracked) & set(declared.untracked), name
        for key in declared.keys:
            node = doc
            for part in key.split("."):
                assert isinstance(node, dict) and part in node, f"{name}: {key} is no key of params.yaml"
                node = node[part]


def test_a_stage_that_reads_an_undeclared_key_fails_naming_it():
    params = config.parse(params_doc())
    view = guard(params, Declared(("sampling", "gate.metric", "gate.alpha", "gate.min_improvement_pct",
                                   "gate.max_resolution_drop_pct")), "preflight")
    assert view.sampling.runs == params.sampling.runs and view.gate.metric == params.gate.metric
    assert view.source == params.source  # where params came from is no key
    with pytest.raises(UndeclaredParam) as e:
        view.gate.min_total_runs  # noqa: B018 - the read is the test
    assert "stage preflight read params key gate.min_total_runs, which it does not declare" in str(e.value)
    # the looks' knobs are the gate's keys, however they are reached
    looks = guard(params, Declared(("sampling.sequential",)), "bench").sampling.sequential
    assert looks.first == params.sampling.sequential.first
    with pytest.raises(UndeclaredParam, match="gate.min_total_runs"):
        looks.min_total_runs  # noqa: B018
    with pytest.raises(UndeclaredParam, match="propose.model, model.name"):
        guard(params, Declared(("model",)), "propose").proposer_model  # noqa: B018
    with pytest.raises(UndeclaredParam, match="skills.paths"):
        guard(params, Declared(("skills.evolvable",)), "x").skills.roots  # noqa: B018


def test_a_key_covers_what_is_below_it_and_nothing_beside_it():
    assert covered("sampling.sequential.first", ["sampling"]) and covered("gate", ["gate"])
    assert not covered("gate.alpha", ["gate.alpha_x"]) and not covered("gate", ["gate.alpha"])
