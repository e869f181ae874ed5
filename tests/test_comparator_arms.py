"""Comparator arms: a pinned external skill set (a directory of a git repository at a commit) installed in place of
the family on the incumbent side, compared in the report as the baseline is, never evolved, never in the evidence.
The end-to-end test runs it through the real CLI in bwrap beside the family's arm."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from skillevo.bench import plan, run_side
from skillevo.bench.cellstore import material
from skillevo.bench.sideplan import build_cells
from skillevo.core import arms as arms_mod
from skillevo.core import comparators, config
from skillevo.files.errors import BadInput
from tests.bench_fixtures import ROOT, make_mini, params_doc

MARKER = "comparator-marker-5b1e"
SKILL = f"""---
name: work
description: Carry out a coding task in this repository, from reading the code to a passing verification.
---

# Work ({MARKER})

Read every module of the package end to end before editing, then make the change and run the tests.
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@e", "-c", "user.name=t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def _third_party(root: Path) -> tuple[Path, str]:
    """A third party's repository with its skill set under skills/, at a commit; a later commit changes it."""
    repo = root / "ce-plugin"
    (repo / "skills/work/scripts").mkdir(parents=True)
    (repo / "skills/work/SKILL.md").write_text(SKILL)
    (repo / "skills/work/scripts/check.sh").write_text("#!/bin/sh\nexit 0\n")
    (repo / "skills/work/scripts/check.sh").chmod(0o755)
    (repo / "README.md").write_text("not a skill\n")
    _git(repo.parent, "init", "-q", repo.name)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "v1")
    pinned = _git(repo, "rev-parse", "HEAD")
    (repo / "skills/work/SKILL.md").write_text(SKILL + "\nA later change the pin must not see.\n")
    _git(repo, "commit", "-qam", "v2")
    return repo, pinned


def _arms(repo: Path, commit: str, skill: str = "work") -> dict:
    return {"work": {"sessions": [{"skill": "work", "prompt": "Use the work skill. {prompt}"}]},
            "ce_work": {"sessions": [{"skill": skill, "prompt": "Use the work skill. {prompt}"}],
                        "comparator": {"source": str(repo), "commit": commit, "path": "skills"}}}


def _params(arms: dict) -> config.Params:
    doc = params_doc()
    doc["arms"] = arms
    return config.parse(doc)


def test_a_comparator_is_read_at_its_commit_with_modes_and_digest(tmp_path):
    repo, pinned = _third_party(tmp_path)
    found = comparators.read(comparators.Comparator(str(repo), pinned, "skills"), tmp_path)
    assert sorted(found.files) == ["work/SKILL.md", "work/scripts/check.sh"]  # its README is outside the path
    assert found.files["work/SKILL.md"].decode() == SKILL  # the pinned commit's, not the later one's
    assert found.executables == {"work/scripts/check.sh"}
    head = _git(repo, "rev-parse", "HEAD")
    assert comparators.read(comparators.Comparator(str(repo), head, "skills"), tmp_path).digest != found.digest


@pytest.mark.parametrize("change, rule", [
    (lambda repo, c: ("0" * 40, "skills"), "a comparator is a commit's tree"),
    (lambda repo, c: (c, "nowhere"), "a comparator is a commit's tree"),
    (lambda repo, c: (c, "."), "no <skill>/SKILL.md"),  # the root holds skills/work, not <skill>/SKILL.md
])
def test_a_comparator_that_is_not_a_pinned_skill_set_is_refused(tmp_path, change, rule):
    repo, pinned = _third_party(tmp_path)
    commit, path = change(repo, pinned)
    with pytest.raises(BadInput) as e:
        comparators.read(comparators.Comparator(str(repo), commit, path), tmp_path, where="params.yaml: arms.x")
    assert rule in str(e.value) and "params.yaml: arms.x" in str(e.value)


def test_a_link_in_the_set_is_refused(tmp_path):
    repo, _ = _third_party(tmp_path)
    (repo / "skills/work/link.md").symlink_to("/etc/passwd")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "a link")
    with pytest.raises(BadInput, match="not a plain file"):
        comparators.read(comparators.Comparator(str(repo), _git(repo, "rev-parse", "HEAD"), "skills"), tmp_path)


def test_reading_a_comparator_runs_none_of_its_repositorys_filters(tmp_path):
    """A third party's `.gitattributes` names a filter its own .git/config defines: `git archive` ran its smudge
    command on the host. Read blob by blob, the bytes are the commit's and nothing runs."""
    repo, _ = _third_party(tmp_path)
    ran = tmp_path / "the-filter-ran"
    (repo / ".gitattributes").write_text("*.md filter=evil\n")
    _git(repo, "config", "filter.evil.smudge", f"sh -c 'touch {ran}; cat'")
    _git(repo, "config", "filter.evil.clean", "cat")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "a filter")
    found = comparators.read(comparators.Comparator(str(repo), _git(repo, "rev-parse", "HEAD"), "skills"), tmp_path)
    assert found.files["work/SKILL.md"].decode().startswith(SKILL) and not ran.exists()


def test_a_comparator_over_its_size_is_refused_before_any_blob_is_read(tmp_path, monkeypatch):
    """A 1 GiB file (1 MB in its repository) cost the host 2,086 MB and 23 s: the cap was checked after `git
    archive`'s whole output was in memory. The tree's sizes are checked first now."""
    repo, _ = _third_party(tmp_path)
    with open(repo / "skills/work/huge.bin", "wb") as f:
        f.truncate(64 << 20)  # zeros: a few KB once git compresses them
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "a huge file")

    def never(*args):
        raise AssertionError("a blob was read before the sizes were checked")
    monkeypatch.setattr(comparators, "_blobs", never)
    with pytest.raises(BadInput, match=r"over 4194304 bytes or 1000 files \(rule: size\)"):
        comparators.read(comparators.Comparator(str(repo), _git(repo, "rev-parse", "HEAD"), "skills"), tmp_path)


@pytest.mark.parametrize("path, rule", [
    ("skills/../skills", "a comparator path is a plain relative directory"),
    ("./skills", "a comparator path is a plain relative directory"),
    ("skills//work", "a comparator path is a plain relative directory"),
    (":(top)skills", "a comparator is a commit's tree"),  # no pathspec magic: a directory of that name, missing
])
def test_a_comparator_path_is_one_plain_relative_directory(tmp_path, path, rule):
    """Such paths ended in an unexpected ValueError; each is a refusal naming its rule."""
    repo, pinned = _third_party(tmp_path)
    with pytest.raises(BadInput, match=f"rule: {re.escape(rule)}"):
        comparators.read(comparators.Comparator(str(repo), pinned, path), tmp_path)


def test_a_comparator_arm_is_never_evolved_and_names_its_own_skills(tmp_path):
    repo, pinned = _third_party(tmp_path)
    p = _params(_arms(repo, pinned))
    assert p.arms["ce_work"].is_comparator and not p.arms["ce_work"].depends_on({"work"})
    assert [a.name for a in arms_mod.required_candidate_arms({"work"}, p.arms)] == ["candidate_work"]
    with pytest.raises(ValueError):
        arms_mod.candidate(p.arms["ce_work"])
    tasks_file = make_mini(tmp_path)
    bad = _params(_arms(repo, pinned, skill="plan"))  # the family has plan; the comparator does not
    with pytest.raises(BadInput) as e:
        plan("incumbent", tasks_file, ROOT / "skills", None, bad)
    assert "arms.ce_work.sessions[0].skill: 'plan' is not a skill of its comparator's set" in str(e.value)


def test_the_comparators_digest_is_in_its_cells_keys(tmp_path):
    repo, pinned = _third_party(tmp_path)
    tasks_file = make_mini(tmp_path)
    from skillevo.bench.cellstore import Context
    from skillevo.core.models import Model

    keys = []
    for commit in (pinned, _git(repo, "rev-parse", "HEAD")):
        p = _params(_arms(repo, commit))
        side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
        side.tasks = side.tasks[:1]
        scratch = tmp_path / f"scratch-{commit[:6]}"
        scratch.mkdir()
        cells = {c.arm.name: c for c in build_cells(side, p.bench, Model("simulator", "m", "http://x"), scratch)}
        found = material(cells["ce_work"], Context("h", 0, None))
        assert found["arm"]["comparator"]["digest"] == side.comparators["ce_work"].digest
        keys.append(found)
        # its template holds the comparator's skill, never the family's
        assert MARKER in (cells["ce_work"].template / ".claude/skills/work/SKILL.md").read_text()
        assert MARKER not in (cells["work"].template / ".claude/skills/work/SKILL.md").read_text()
    assert keys[0]["arm"]["comparator"]["digest"] != keys[1]["arm"]["comparator"]["digest"]


@pytest.mark.cli
@pytest.mark.bwrap
def test_the_family_is_compared_with_a_pinned_comparator_through_the_real_cli(tmp_path):
    repo, pinned = _third_party(tmp_path)
    tasks_file = make_mini(tmp_path)
    p = _params(_arms(repo, pinned))
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    side.tasks = side.tasks[:1]
    out = tmp_path / "out"
    rows = {r["arm"]: r for r in run_side(side, p, out, quiet=True, scratch_root=tmp_path)}
    family, comparator = rows["work"], rows["ce_work"]
    assert family["resolved"] and comparator["resolved"], (family["error_detail"], comparator["error_detail"])
    assert comparator["skills_loaded"] == [["work"]] and comparator["skill_invoked"] is True
    # the comparator's text reached the model, the family's did not
    assert MARKER in (out / comparator["transcripts"][0]["path"]).read_text()
    assert MARKER not in (out / family["transcripts"][0]["path"]).read_text()
    bench = json.loads((out / "bench.json").read_text())
    [described] = [a for a in bench["arms"] if a["name"] == "ce_work"]
    assert described["comparator"] == {"source": str(repo), "commit": pinned, "path": "skills",
                                       "digest": side.comparators["ce_work"].digest}
    report = (out / "report.md").read_text()
    assert f"## Against the comparator `ce_work` (the pinned skill set {repo} at {pinned[:12]}, skills)" in report
    assert "| work | 1/1 | 1/1 | +0 points |" in report


def test_the_proposer_never_sees_a_comparators_rows(tmp_path):
    from types import SimpleNamespace

    from skillevo.evidence import _drop_baselines

    repo, pinned = _third_party(tmp_path)
    p = _params(_arms(repo, pinned))
    inputs = SimpleNamespace(rows=[SimpleNamespace(row={"incumbent_arm": arm}) for arm in ("work", "ce_work",
                                                                                           "ce_work")], dropped=[])
    _drop_baselines(inputs, p)
    assert [r.row["incumbent_arm"] for r in inputs.rows] == ["work"]
    assert inputs.dropped == [{"what": "2 rows of comparator arms (ce_work)",
                               "reason": "left out: they ran a pinned external skill set, never the family's"}]
