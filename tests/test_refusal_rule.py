"""A refusal carries the rule it applies as a field (SkillevoError.rule), read from the one place the message puts
it, so tests and tools need not match the prose."""

from __future__ import annotations

import pytest

from skillevo.core import frontmatter, tasks
from skillevo.files import safefs
from skillevo.files.errors import BadInput, rule_of


def test_the_rule_is_the_last_one_a_message_names():
    assert rule_of("x: bad (rule: a) and then (rule: b c)") == "b c"
    assert rule_of("x: no rule named") is None


def test_refusals_from_different_modules_carry_their_rule(tmp_path):
    with pytest.raises(BadInput) as missing:
        safefs.read_file(tmp_path / "absent.json", max_bytes=10, what="params file")
    with pytest.raises(BadInput) as name:
        frontmatter.check("work", "---\nname: Work\ndescription: d\n---\n", "SKILL.md")
    (tmp_path / "tasks.yaml").write_text("schema_version: 1\ntasks: [{id: 1}]\n")
    with pytest.raises(BadInput) as task:
        tasks.load(tmp_path / "tasks.yaml")
    assert (missing.value.rule, name.value.rule) == ("inputs exist", "frontmatter name")
    assert task.value.rule  # a schema refusal names the keyword it broke
