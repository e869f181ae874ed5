"""SKILL.md frontmatter: every violation refused with the file and the rule where skills enter the pipeline
(bench, freeze, apply); privileged keys only when params allow; every change shown."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from skillevo.apply.common import ApplyPaths, ApplyRefused
from skillevo.apply.inputs import check_headers
from skillevo.bench import plan
from skillevo.core import config, frontmatter, layout, params_edit
from skillevo.files.errors import BadInput
from skillevo.gate.report import overlay_section
from tests.bench_fixtures import ROOT
from tests.test_freeze import _freeze, _overlay, repo  # noqa: F401 - repo is a fixture

WORK = (ROOT / "skills/work/SKILL.md").read_text()
BODY = WORK.split("---\n", 2)[2]


def _header(**fields) -> str:
    base = yaml.safe_load(WORK.split("---\n", 2)[1])
    base.update(fields)
    return "---\n" + yaml.safe_dump({k: v for k, v in base.items() if v is not None}, sort_keys=False) + "---\n"


VIOLATIONS = {
    "no frontmatter": (BODY, r"does not start with a `---` line .*\(rule: frontmatter required\)"),
    "never closed": ("---\nname: work\n" + BODY, r"never closed .*\(rule: frontmatter required\)"),
    "broken YAML": ("---\nname: work\ndescription: [unclosed\n---\n" + BODY, r"SKILL\.md:\d+: not valid YAML"),
    "not a mapping": ("---\n- name\n---\n" + BODY, r"must be a YAML mapping"),
    "no description": (_header(description=None) + BODY, r"`description` must be a non-empty string"),
    "empty description": (_header(description="  ") + BODY, r"`description` must be a non-empty string"),
    "1,305-character description": (_header(description="d" * 1305) + BODY,
                                    r"`description` is 1305 characters, over 1024 "
                                    r"\(rule: frontmatter description length\)"),
    "HTML in the description": (_header(description="Use <b>always</b>") + BODY,
                                r"`description` contains markup \('<b>'\)"
                                r".*\(rule: frontmatter description has no XML/HTML tags\)"),
    "uppercase name": (_header(name="Work") + BODY, r"`name` 'Work' must be lowercase .*\(rule: frontmatter name\)"),
    "double hyphen": (_header(name="wo--rk") + BODY, r"\(rule: frontmatter name\)"),
    "65-character name": (_header(name="w" * 65) + BODY, r"`name` is 65 characters, over 64"),
    "reserved word": (_header(name="claude-work") + BODY, r"reserved word 'claude'"),
    "name of another skill": (_header(name="plan") + BODY, r"`name` 'plan' is not the skill's directory name 'work' "
                                                           r"\(rule: name matches directory\)"),
    "unknown key": (_header(owner="me") + BODY, r"unknown frontmatter key\(s\) \['owner'\]"),
    "metadata not strings": (_header(metadata={"version": 2}) + BODY, r"`metadata` must map strings to strings"),
    "allowed-tools added": (_header(**{"allowed-tools": "Bash(*)"}) + BODY,
                            r"overlay/work: changes privileged frontmatter key\(s\) \['allowed-tools'\]"
                            r".*\(rule: privileged keys\)"),
    "model added": (_header(model="claude-opus-4-6") + BODY, r"privileged frontmatter key\(s\) \['model'\]"),
    "hooks added": (_header(hooks={"PreToolUse": []}) + BODY, r"privileged frontmatter key\(s\) \['hooks'\]"),
}


@pytest.mark.parametrize("case", sorted(VIOLATIONS))
def test_freeze_refuses_every_frontmatter_violation_with_the_file_and_the_rule(repo, tmp_path, case):  # noqa: F811
    text, message = VIOLATIONS[case]
    with pytest.raises(BadInput, match=message) as caught:
        _freeze(repo, _overlay(tmp_path, text))
    assert "work" in str(caught.value)  # the file (or the skill) is named
    assert not (repo / "results/freeze/manifest.json").exists()


def test_privileged_keys_pass_when_params_allow_and_every_change_is_listed(repo, tmp_path):  # noqa: F811
    params = repo / "params.yaml"
    params_edit.set_value(params, "propose", "allow", ["privileged-frontmatter"])
    manifest = _freeze(repo, _overlay(tmp_path, _header(**{"allowed-tools": "Read Grep"},
                                                        description="Carry out a coding task here.") + BODY))
    assert manifest["frontmatter_changes"] == [
        "work: added `allowed-tools`: 'Read Grep'",
        f"work: changed `description`: {yaml.safe_load(WORK.split('---', 2)[1])['description']!r} -> "
        "'Carry out a coding task here.'",
    ]
    section = "\n".join(overlay_section(manifest))
    assert "- frontmatter: 2 change(s)" in section and "work: added `allowed-tools`: 'Read Grep'" in section


def test_an_unchanged_header_is_reported_as_unchanged(repo, tmp_path):  # noqa: F811
    manifest = _freeze(repo, _overlay(tmp_path))
    assert manifest["frontmatter_changes"] == []
    assert "- frontmatter: unchanged" in overlay_section(manifest)


def test_extra_keys_are_refused_until_params_name_them(repo, tmp_path):  # noqa: F811
    text = _header(owner="platform-team", description="Carry out a coding task here.") + BODY
    with pytest.raises(BadInput, match=r"unknown frontmatter key\(s\) \['owner'\]"):
        _freeze(repo, _overlay(tmp_path, text))
    params_edit.set_value(repo / "params.yaml", "skills", "frontmatter_keys", ["owner"])
    assert ("work: added `owner`: 'platform-team'"
            in _freeze(repo, _overlay(tmp_path / "again", text))["frontmatter_changes"])


def test_the_bench_refuses_a_family_whose_header_is_broken(repo):  # noqa: F811
    (repo / "skills/plan/SKILL.md").write_text(
        (ROOT / "skills/plan/SKILL.md").read_text().replace("name: plan", "name: Plan"))
    with pytest.raises(BadInput, match=r"skills/plan/SKILL\.md: `name` 'Plan' must be lowercase"):
        plan("incumbent", repo / "tasks/tasks.yaml", repo / "skills", None, config.load(repo / "params.yaml"))


def test_the_bench_refuses_a_candidate_overlay_that_breaks_a_header(repo, tmp_path):  # noqa: F811
    ov = _overlay(tmp_path, BODY)  # what a hand-made results/freeze/overlay could hold
    with pytest.raises(BadInput, match=r"overlay/work/SKILL\.md: does not start with a `---` line"):
        plan("candidate", repo / "tasks/tasks.yaml", repo / "skills", ov, config.load(repo / "params.yaml"))


def _apply_case(repo: Path, tmp_path: Path, text: str) -> tuple[ApplyPaths, dict, dict]:  # noqa: F811
    freeze_dir = tmp_path / "freeze"
    (freeze_dir / "overlay/work").mkdir(parents=True)
    (freeze_dir / "overlay/work/SKILL.md").write_text(text)
    live = (repo / "skills/work/SKILL.md").read_bytes()
    manifest = {"destinations": {"skills/work/SKILL.md": hashlib.sha256(live).hexdigest()}}
    return ApplyPaths(repo=repo, freeze=freeze_dir), manifest, {"work/SKILL.md": text.encode()}


@pytest.mark.parametrize("case", ["no frontmatter", "name of another skill", "allowed-tools added",
                                  "1,305-character description"])
def test_apply_checks_the_headers_it_would_write(repo, tmp_path, case):  # noqa: F811
    text, message = VIOLATIONS[case]
    paths, manifest, files = _apply_case(repo, tmp_path, text)
    with pytest.raises(ApplyRefused, match=message):
        check_headers(config.load(repo / "params.yaml"), paths, manifest, files)


def test_apply_leaves_a_drifted_destination_to_the_drift_check(repo, tmp_path):  # noqa: F811
    paths, manifest, files = _apply_case(repo, tmp_path, _header(model="claude-opus-4-6") + BODY)
    manifest["destinations"]["skills/work/SKILL.md"] = "0" * 64  # edited since freeze: refused elsewhere, by name
    check_headers(config.load(repo / "params.yaml"), paths, manifest, files)


def test_the_shipped_families_keep_the_rules():
    for root in ("skills", ".claude/skills"):
        headers = frontmatter.check_family(layout.read_family(ROOT / root), root, layout.SKILL_FILE)
        assert sorted(headers) == ["plan", "work"]
