"""Arms that name a skill, let the model choose (`auto`) or install none (`none`): the params rules, which
candidate arms an overlay requires, and what counts as the skill being invoked."""

from __future__ import annotations

import pytest

from skillevo.core import arms, config
from skillevo.files.errors import BadInput

FAMILY = {"plan", "work"}
TASK = "{prompt}\nRun the verification before you finish."


def _arms(**spec: list[tuple[str, str]]) -> dict[str, arms.Arm]:
    doc = {name: {"sessions": [{"skill": skill, "prompt": prompt} for skill, prompt in sessions]}
           for name, sessions in spec.items()}
    return dict(config.parse({"arms": doc}).arms)


def test_auto_and_none_sessions_load_as_arms_and_check_against_the_family():
    loaded = _arms(auto=[("auto", TASK)], baseline=[("none", TASK)], direct=[("work", "Use the work skill: {prompt}")])
    arms.check_skills(loaded, FAMILY)
    assert loaded["baseline"].is_baseline and not loaded["auto"].is_baseline and not loaded["direct"].is_baseline
    assert loaded["auto"].describe()["skills"] == ["auto"] and loaded["baseline"].describe()["skills"] == ["none"]


@pytest.mark.parametrize("spec, message", [
    ({"a": [("auto", "Use the work skill for: {prompt}")]},
     r"arms\.a\.sessions\[0\]\.prompt: a 'auto' session's prompt may not mention a skill"),
    ({"b": [("none", "/work {prompt}")]}, r"arms\.b\.sessions\[0\]\.prompt: a 'none' session's prompt"),
    ({"m": [("plan", "Use the plan skill: {prompt}"), ("none", TASK)]},
     r"arms\.m\.sessions\[1\]\.skill: 'none' in an arm whose other sessions use skills"),
])
def test_params_refuse_a_choice_that_names_a_skill_or_a_half_baseline(spec, message):
    with pytest.raises(BadInput, match=message):
        _arms(**spec)


def test_a_family_skill_may_not_take_a_reserved_name():
    with pytest.raises(BadInput, match=r"skill 'auto' takes a name arms use for a choice"):
        arms.check_skills(_arms(a=[("auto", TASK)]), {"auto", "work"})
    with pytest.raises(BadInput, match=r"'nope' is not a skill of the family \(plan, work\), auto or none"):
        arms.check_skills(_arms(x=[("nope", "{prompt}")]), FAMILY)


def test_an_auto_arm_is_required_by_every_overlay_and_a_baseline_by_none():
    loaded = _arms(auto=[("auto", TASK)], baseline=[("none", TASK)], planned=[("plan", "Use the plan skill: {prompt}")])
    required = {frozenset(t): [a.name for a in arms.required_candidate_arms(set(t), loaded)]
                for t in ({"plan"}, {"work"}, {"plan", "work"})}
    assert required == {frozenset({"plan"}): ["candidate_auto", "candidate_planned"],
                        frozenset({"work"}): ["candidate_auto"],
                        frozenset({"plan", "work"}): ["candidate_auto", "candidate_planned"]}
    assert arms.required_candidate_arms(set(), loaded) == []
    assert arms.required_candidate_arms({"work"}, {"baseline": loaded["baseline"]}) == []


@pytest.mark.parametrize("expected, loaded, invoked, must", [
    ("work", ["work"], True, True),
    ("work", ["plan"], False, True),
    ("work", [], False, True),
    ("auto", ["plan"], True, False),  # any skill: the model chose one
    ("auto", [], False, False),  # chose none: measured by what it then did, not a failure
    ("none", [], None, False),  # a baseline expects nothing
    ("none", ["simplify"], None, False),  # a bundled CLI skill is not the family's
    (None, ["work"], None, False),  # the proposer
])
def test_skill_invoked_is_decided_in_one_place(expected, loaded, invoked, must):
    assert arms.skill_invoked(expected, loaded) is invoked
    assert arms.must_load(expected) is must
