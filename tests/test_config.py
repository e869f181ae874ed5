"""params.yaml through its one loader: defaults from the schema, typed frozen sections, model ids, YAML caps."""

from __future__ import annotations

import dataclasses
from datetime import date

import pytest
import yaml

from skillevo.core import config
from skillevo.files import documents
from skillevo.files.errors import BadInput
from skillevo.files.schemas import load_schema
from tests.bench_fixtures import ROOT

ARMS = {"a": {"sessions": [{"skill": "work", "prompt": "{prompt}"}]}}
TODAY = date(2026, 12, 1)


def test_the_project_params_load_without_a_warning():
    params = config.load(ROOT / "params.yaml", today=TODAY)
    assert params.notes == ()
    assert params.skills.roots == ("skills", ".claude/skills")
    assert set(params.arms) == {"auto", "baseline", "workflow"}


def test_every_default_comes_from_the_schema():
    params = config.parse({"arms": ARMS}, today=TODAY)
    schema = load_schema("params")["$defs"]
    for section in ("model", "evidence", "propose", "bench", "gate"):
        typed = getattr(params, section)
        for key, spec in schema[section]["properties"].items():
            value = getattr(typed, key)
            expected = spec["default"]
            if key == "limits":  # a nested section: its own defaults
                value = dataclasses.asdict(value)
                expected = {k: v["default"] for k, v in spec["properties"].items()}
            assert (dict(value) if isinstance(value, dict | type(params.arms)) else
                    list(value) if isinstance(value, tuple) else value) == expected, f"{section}.{key}"
    assert isinstance(params.gate.min_improvement_pct, float)  # one JSON form whether YAML said 5 or 5.0


def test_sections_are_frozen():
    params = config.parse({"arms": ARMS}, today=TODAY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.sampling.runs = 10  # type: ignore[misc]
    with pytest.raises(TypeError):
        params.arms["b"] = params.arms["a"]  # type: ignore[index]


@pytest.mark.parametrize("doc, message", [
    ({"bench": {"runz": 5}}, r"\$\.bench: Additional properties are not allowed \('runz' was unexpected\)"),
    ({"gate": {"min_improvement_pct": float("inf")}}, r"\$\.gate\.min_improvement_pct: inf is not a finite number"),
    ({"bench": {"ray_cell_resources": {"num_cpus": -1}}}, r"\$\.bench\.ray_cell_resources\.num_cpus: -1"),
    ({"gate": {"alpha": 0}}, r"\$\.gate\.alpha: 0 is less than or equal to the minimum of 0"),
    ({"gate": {"alpha": 0.05, "quality_promotion_alpha": 0.01}},
     r"\$\.gate\.quality_promotion_alpha: this key is retired: a promotion now makes one claim, cheaper per "
     r"resolved task, .*\(rule: current params\)"),
    ({"propose": {"timeout_s": 0}}, r"\$\.propose\.timeout_s: 0 is less than the minimum of 10"),
    ({"model": {"effort": "extreme"}}, r"\$\.model\.effort: 'extreme' is not one of"),
    ({"skills": {"dir": "skills"}}, r"\$\.skills: Additional properties .*'dir' was unexpected"),
    ({"tasks": {"target_roots": "x"}}, r"\$\.tasks\.target_roots: 'x' is not of type 'array'"),
])
def test_bad_values_are_refused_by_key_and_rule(doc, message):
    with pytest.raises(BadInput, match=message):
        config.parse({"arms": ARMS, **doc}, today=TODAY)


@pytest.mark.parametrize("name, today, outcome", [
    ("claude-sonnet-4-6", TODAY, []),
    ("claude-haiku-4-5-20251001", TODAY, []),
    ("claude-haiku-4-5", TODAY, ["short id for the snapshot 'claude-haiku-4-5-20251001'"]),
    ("claude-sonnet-4-5", date(2026, 11, 29), ["retires on 2026-11-30", "short id for the snapshot"]),
    ("claude-sonnet-4-5", date(2026, 11, 30), "was retired on 2026-11-30"),
    ("claude-sonnet-4-5-20250929", TODAY, "was retired on 2026-11-30"),
    ("claude-opus-4-1", TODAY, "is remapped by the pinned Claude Code"),
    ("sonnet", TODAY, "floating alias"),
    ("sonnet[1m]", TODAY, "floating alias"),
    ("best", TODAY, "floating alias"),
    ("claude-opus-latest", TODAY, "floating alias"),
    ("qwen3-coder-30b", TODAY, ["not in the pinned Claude Code"]),
])
def test_model_ids_are_checked_against_the_pinned_catalog(name, today, outcome):
    doc = {"arms": ARMS, "model": {"name": name}}
    if isinstance(outcome, str):
        with pytest.raises(BadInput, match=rf"model\.name: .*{outcome}"):
            config.parse(doc, today=today)
        with pytest.raises(BadInput, match=rf"propose\.model: .*{outcome}"):
            config.parse({"arms": ARMS, "propose": {"model": name}}, today=today)
        return
    notes = config.parse(doc, today=today).notes
    assert len(notes) == len(outcome) and all(o in n for o, n in zip(outcome, notes, strict=True)), notes


def test_family_directories_have_one_normal_form():
    params = config.parse({"arms": ARMS,
                           "skills": {"paths": {"skills": "./skills/", "mirrors": ["./.claude/skills/"]}}})
    assert params.skills.roots == ("skills", ".claude/skills")
    with pytest.raises(BadInput, match="is the canonical directory itself"):
        config.parse({"arms": ARMS, "skills": {"paths": {"skills": "skills", "mirrors": ["skills/"]}}})


def test_the_stage_options_replace_the_family_directories(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"arms": ARMS}))
    params = config.load(path, skills="my/skills", mirrors=["a/skills", "b/skills/"])
    assert params.skills.roots == ("my/skills", "a/skills", "b/skills")
    with pytest.raises(BadInput, match=r"\$\.skills\.paths\.mirrors\[0\]: '/abs' is not a directory relative"):
        config.load(path, mirrors=["/abs"])


@pytest.mark.parametrize("text, message", [
    ("a: &a [*a]\n", "nested deeper than 48"),
    ("x: " + "[" * 60 + "]" * 60 + "\n", "nested deeper than 48"),
    ("".join(f"k{i}: &k{i} [1]\n" for i in range(70)) + "".join(f"r{i}: *k{i}\n" for i in range(70)),
     "more than 64 aliases"),
    ("a0: &a0 [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n" + "".join(  # 50 aliases, a million nodes once expanded
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 6)), "expands to more than 200000 nodes"),
])
def test_yaml_caps(text, message):
    with pytest.raises(BadInput, match=message):
        documents.parse_yaml(text, "doc.yaml")
