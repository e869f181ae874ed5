"""Each shape is defined once (schemas/common.schema.json): the other schemas refer to it, and the code that checks
the same thing reads it from there, so a params file cannot accept a name the frontmatter check refuses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from skillevo.core import frontmatter
from skillevo.files import schemas
from skillevo.files.errors import BadInput

COMMON = json.loads((schemas.SCHEMA_DIR / "common.schema.json").read_text())["$defs"]
OTHERS = sorted(p for p in schemas.SCHEMA_DIR.glob("*.schema.json") if p.name != "common.schema.json")


@pytest.mark.parametrize("shape", sorted(COMMON))
def test_no_other_schema_spells_a_common_pattern(shape):
    pattern = json.dumps(COMMON[shape]["pattern"])  # as it would be written in a schema file
    assert [p.name for p in OTHERS if pattern in p.read_text()] == []


@pytest.mark.parametrize("name, where", [("sha256", "promotion"), ("sha256", "result-row"), ("arm", "promotion"),
                                         ("arm", "result-row"), ("skill_name", "params"), ("relpath", "tasks")])
def test_the_schemas_refer_to_the_common_definition(name, where):
    local = schemas.load_schema(where)["$defs"][name]
    assert local["$ref"].startswith("common.schema.json#/$defs/")


def _frontmatter_accepts(name: str) -> bool:
    try:
        frontmatter.check(name, f"---\nname: {json.dumps(name)}\ndescription: d\n---\nbody\n", "SKILL.md")
    except BadInput:
        return False
    return True


def _params_accept(name: str) -> bool:
    return schemas.schema_validator("params", "skill_name").is_valid(name)


@pytest.mark.parametrize("name", ["work", "plan-2", "a", "x" * 64, "Work", "my_skill", "work.v2", "-work", "work-",
                                  "a--b", "x" * 65, "claude-helper", "my-anthropic", ""])
def test_params_refuse_what_the_frontmatter_refuses(name):
    assert _params_accept(name) == _frontmatter_accepts(name)


def test_arm_names_fit_both_sides():
    """An incumbent arm name params accept, with candidate_ in front, is still an arm name every row accepts."""
    incumbent, arm = (schemas.schema_validator("common", d) for d in ("incumbent_arm", "arm"))
    longest = "a" * 54
    assert incumbent.is_valid(longest) and arm.is_valid("candidate_" + longest)
    assert not incumbent.is_valid("candidate_x") and not incumbent.is_valid("a" * 55)


def test_every_schema_is_checked_before_a_document_is_and_reading_one_needs_no_jsonschema():
    """The registry a validator resolves `$ref`s in holds every schema, each checked against 2020-12; a process
    that only reads definitions (the identity stage, run on every repro) imports no jsonschema."""
    schemas._registry.cache_clear()
    registry = schemas._registry()
    assert {uri.rsplit("/", 1)[-1] for uri in registry} == {p.name for p in schemas.SCHEMA_DIR.glob("*.schema.json")}
    assert schemas.checked_schema.cache_info().currsize >= len(list(schemas.SCHEMA_DIR.glob("*.schema.json")))
    code = ("import sys\nimport skillevo.stages.identity, skillevo.core.config, skillevo.core.frontmatter\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jsonschema', 'referencing')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
