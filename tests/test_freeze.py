"""Freeze: hostile overlays are refused naming the file and the rule; a good one is bound by digest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from skillevo.core import config, layout, memory, overlay, params_edit
from skillevo.files.errors import BadInput
from skillevo.files.schemas import validate
from skillevo.freeze import freeze
from tests.bench_fixtures import ROOT

WASTEFUL = "Read every module of the package end to end"
NECESSARY = "Handle empty and boundary inputs explicitly"


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git repository shaped like the project: skills/, a mirror, params.yaml, tasks/ with oracles."""
    repo = tmp_path / "repo"
    for rel in ("skills", ".claude/skills", "tasks"):
        shutil.copytree(ROOT / rel, repo / rel)
    shutil.copy(ROOT / "params.yaml", repo / "params.yaml")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)
    return repo


def _overlay(root: Path, text: str | None = None, rel: str = "work/SKILL.md") -> Path:
    ov = root / "overlay"
    (ov / rel).parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        text = "".join(line for line in (ROOT / "skills/work/SKILL.md").read_text().splitlines(True)
                       if WASTEFUL not in line)
    (ov / rel).write_text(text)
    return ov


def _freeze(repo: Path, ov: Path) -> dict:
    return freeze(ov, params=config.load(repo / "params.yaml"), tasks_file=repo / "tasks/tasks.yaml", repo=repo,
                  out=repo / "results/freeze", session=None)


def test_good_overlay_is_frozen_read_only_and_bound(repo, tmp_path):
    manifest = _freeze(repo, _overlay(tmp_path))
    validate(manifest, "freeze-manifest.schema.json", "manifest")
    frozen = repo / "results/freeze/overlay/work/SKILL.md"
    assert frozen.stat().st_mode & 0o777 == 0o444 and frozen.parent.stat().st_mode & 0o777 == 0o555
    assert manifest["required_candidate_arms"] == ["candidate_auto", "candidate_workflow"]
    assert sorted(manifest["destinations"]) == [".claude/skills/work/SKILL.md", "skills/work/SKILL.md"]
    assert manifest["changed_lines"] == 1 and manifest["candidate_origin"] == "hand-written"
    assert manifest["overlay_digest"] == layout.tree_digest({"work/SKILL.md": frozen.read_bytes()})
    again = _freeze(repo, _overlay(tmp_path))  # same inputs, same digest; the old frozen copy is replaced
    assert again == manifest
    assert json.loads((repo / "results/freeze/manifest.json").read_text()) == manifest


def _symlink_file(root: Path) -> Path:
    ov = _overlay(root)
    os.symlink(ROOT / "skills/work/SKILL.md", ov / "work/OTHER.md")
    return ov


def _dotdot_through_dir_symlink(root: Path) -> Path:
    ov = root / "overlay"
    ov.mkdir()
    (root / "elsewhere/work").mkdir(parents=True)
    (root / "elsewhere/work/SKILL.md").write_text("x\n")
    os.symlink(root / "elsewhere/work", ov / "work")
    return ov


def _too_many(root: Path) -> Path:
    ov = _overlay(root)
    for i in range(20):
        (ov / f"work/extra{i}.md").write_text("x\n")
    return ov


@pytest.mark.parametrize("make, message", [
    (_symlink_file, r"work/OTHER.md: is a symlink \(rule: no symlinks\)"),
    (_dotdot_through_dir_symlink, r"overlay/work: is a symlink \(rule: no symlinks\)"),
    (lambda r: _overlay(r, "x\n", rel="review/SKILL.md"), r"review/SKILL.md: skill 'review' is not evolvable"),
    (lambda r: _overlay(r, "x = 1\n", rel="work/helper.py"),
     r"work/helper.py: has no incumbent .*propose\.allow: supporting-files"),
    (_too_many, r"more than 16 files .*\(rule: file count\)"),
    (lambda r: _overlay(r, "x" * (70 << 10)),
     r"work/SKILL.md: overlay file is \d+ bytes, over the limit of 65536 \(rule: size limit\)"),
    (lambda r: (r / "overlay").mkdir() or (r / "overlay"), r"the overlay is empty"),
    (lambda r: _overlay(r, (ROOT / "skills/work/SKILL.md").read_text()), r"identical to the incumbent, bytes and mode"),
    (lambda r: _overlay(r, "---\nname: work\n---\n" + "".join(f"line {i}\n" for i in range(60))),
     r"over the edit budget of 40"),
    (lambda r: _overlay(r, (ROOT / "skills/work/SKILL.md").read_text() + "# skillevo-oracle-canary: 1234\n"),
     r"hidden oracle's canary \(rule: no hidden-oracle content in a skill\)"),
    (lambda r: _overlay(r, "x\n", rel="work/NEW.md"), r"work/NEW.md: has no incumbent"),
])
def test_hostile_overlays_are_refused(repo, tmp_path, make, message):
    with pytest.raises(BadInput, match=message):
        _freeze(repo, make(tmp_path))
    assert not (repo / "results/freeze/manifest.json").exists()


def _oracle_lines(repo: Path) -> list[str]:
    """Every hidden-oracle line the guard protects: long, not a canary, not visible in a target."""
    visible = {line.strip() for p in (repo / "tasks/targets").rglob("*") if p.is_file()
               for line in p.read_text(errors="replace").splitlines()}
    return [line.strip() for p in sorted((repo / "tasks/oracles").rglob("*.py")) for line in p.read_text().splitlines()
            if len(line.strip()) > 20 and "canary" not in line and line.strip() not in visible]


@pytest.mark.parametrize("shape", ["line", "bullet", "quote", "inline"])
def test_oracle_line_copied_into_an_overlay_is_refused_in_any_markdown_shape(repo, tmp_path, shape):
    line = _oracle_lines(repo)[0]
    text = {"line": line, "bullet": f"- {line}", "quote": f"> {line}", "inline": f"Check that `{line}` holds."}[shape]
    with pytest.raises(BadInput, match="a line of a hidden oracle file"):
        _freeze(repo, _overlay(tmp_path, (ROOT / "skills/work/SKILL.md").read_text() + text + "\n"))


def test_a_bare_canary_token_is_refused(repo, tmp_path):
    canary = next(line for p in (repo / "tasks/oracles").rglob("*.py") for line in p.read_text().splitlines()
                  if "canary" in line)
    token = canary.split()[-1]  # the hex token alone, without the marker
    with pytest.raises(BadInput, match="canary"):
        _freeze(repo, _overlay(tmp_path, (ROOT / "skills/work/SKILL.md").read_text() + f"Remember {token}.\n"))


def test_destination_drift_or_missing_mirror_is_refused(repo, tmp_path):
    (repo / ".claude/skills/work/SKILL.md").write_text("edited but not committed\n")
    with pytest.raises(BadInput, match=r"\.claude/skills/work/SKILL.md: differs from its committed bytes"):
        _freeze(repo, _overlay(tmp_path))
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=repo, check=True)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["skills"]["paths"]["mirrors"].append("plugin/skills")
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(BadInput, match=r"plugin/skills/work/SKILL.md: has no committed base"):
        _freeze(repo, _overlay(tmp_path))


def test_a_mirror_that_is_not_a_byte_copy_is_refused(repo, tmp_path):
    (repo / ".claude/skills/work/SKILL.md").write_text("a drifted mirror, committed\n")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "drift"], cwd=repo,
                   check=True)
    with pytest.raises(BadInput,
                       match=r"\.claude/skills/work/SKILL.md: is not a copy of skills/work/SKILL.md, bytes and mode"):
        _freeze(repo, _overlay(tmp_path))


def test_mirror_paths_have_one_normal_form(repo, tmp_path):
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["skills"]["paths"] = {"skills": "./skills/", "mirrors": ["./.claude/skills/"]}
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    manifest = _freeze(repo, _overlay(tmp_path))
    assert sorted(manifest["destinations"]) == [".claude/skills/work/SKILL.md", "skills/work/SKILL.md"]


NEW = "work/reference/checklist.md"
NEW_DESTINATIONS = [f".claude/skills/{NEW}", f"skills/{NEW}"]


def _allow_supporting_files(repo: Path) -> None:
    params_edit.set_value(repo / "params.yaml", "propose", "allow", ["supporting-files"])
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "allow"], cwd=repo,
                   check=True)


def _with_new_file(tmp_path: Path) -> Path:
    ov = _overlay(tmp_path)
    (ov / NEW).parent.mkdir(parents=True)
    (ov / NEW).write_text("# Checklist\n\n- Run the tests once.\n")
    return ov


def test_a_new_file_is_bound_absent_in_every_root(repo, tmp_path):
    _allow_supporting_files(repo)
    manifest = _freeze(repo, _with_new_file(tmp_path))
    validate(manifest, "freeze-manifest.schema.json", "manifest")
    assert manifest["destinations"] == {
        **dict.fromkeys(NEW_DESTINATIONS),  # absent at HEAD and in the working tree: apply creates them
        ".claude/skills/work/SKILL.md": manifest["destinations"]["skills/work/SKILL.md"],
        "skills/work/SKILL.md": manifest["destinations"]["skills/work/SKILL.md"],
    }
    assert manifest["destinations"]["skills/work/SKILL.md"] is not None
    assert (repo / "results/freeze/overlay" / NEW).read_text().startswith("# Checklist")
    assert manifest["changed_lines"] == 1 + 3  # the edit, and every line of the new file


def test_a_new_file_needs_params(repo, tmp_path):
    with pytest.raises(BadInput, match=rf"overlay file {NEW}: has no incumbent skills/{NEW} to replace \(rule: "
                                       r"replacements only; params propose\.allow: supporting-files lets"):
        _freeze(repo, _with_new_file(tmp_path))
    assert not (repo / "results/freeze/manifest.json").exists()


def _untracked(repo: Path) -> None:
    (repo / ".claude/skills/work/reference").mkdir()
    (repo / f".claude/skills/{NEW}").write_text("a draft nobody committed\n")


def _ignored(repo: Path) -> None:
    (repo / ".claude/skills/work/reference").mkdir()
    (repo / f".claude/skills/{NEW}").write_text("generated\n")
    (repo / ".git/info/exclude").write_text("checklist.md\n")


def _symlink(repo: Path) -> None:
    (repo / ".claude/skills/work/reference").mkdir()
    (repo / f".claude/skills/{NEW}").symlink_to("/nonexistent")  # dangling: apply would create through it


def _directory(repo: Path) -> None:
    (repo / f".claude/skills/{NEW}").mkdir(parents=True)


def _committed_in_the_mirror_only(repo: Path) -> None:
    (repo / ".claude/skills/work/reference").mkdir()
    (repo / f".claude/skills/{NEW}").write_text("only here\n")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "mirror"], cwd=repo,
                   check=True)


def _deleted_but_committed(repo: Path) -> None:
    _committed_in_the_mirror_only(repo)
    (repo / f".claude/skills/{NEW}").unlink()


def _symlinked_parent(repo: Path) -> None:
    (repo / ".claude/skills/work/reference").symlink_to("../../../skills/work")


def _mirror_lacks_the_skill(repo: Path) -> None:
    shutil.rmtree(repo / ".claude/skills/work")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "drop"], cwd=repo, check=True)


def _file_as_parent(repo: Path) -> None:
    (repo / "skills/work/reference").write_text("a file where a directory would go\n")


def test_a_new_file_in_a_skill_a_mirror_does_not_carry_is_refused(repo, tmp_path):
    _allow_supporting_files(repo)
    _mirror_lacks_the_skill(repo)
    ov = tmp_path / "overlay"
    (ov / NEW).parent.mkdir(parents=True)
    (ov / NEW).write_text("# Checklist\n")  # the only file: nothing replaced would catch the mirror
    with pytest.raises(BadInput, match=r"repo/\.claude/skills/work/SKILL\.md: has no committed base at HEAD \(and it "
                                       r"does not exist: a mirror without it\?"):
        _freeze(repo, ov)


@pytest.mark.parametrize("make, message", [
    (_untracked, rf"repo/\.claude/skills/{NEW}: is a file that is not committed, where the overlay adds a new file"),
    (_ignored, rf"repo/\.claude/skills/{NEW}: is a file git ignores, where the overlay adds a new file"),
    (_symlink, rf"repo/\.claude/skills/{NEW}: is a symlink, where the overlay adds a new file"),
    (_directory, rf"repo/\.claude/skills/{NEW}: is a directory, where the overlay adds a new file"),
    (_committed_in_the_mirror_only, rf"repo/\.claude/skills/{NEW}: is committed at HEAD, yet the overlay adds it"),
    (_deleted_but_committed, rf"repo/\.claude/skills/{NEW}: is committed at HEAD, yet the overlay adds it"),
    (_symlinked_parent, r"repo/\.claude/skills/work/reference: is a symlink \(rule: no symlinks\); a new file is "
                        r"created only below plain directories"),
    (_file_as_parent, r"repo/skills/work/reference: is not a directory; a new file is created only below plain"),
])
def test_a_new_file_where_something_already_is_is_refused(repo, tmp_path, make, message):
    _allow_supporting_files(repo)
    make(repo)
    with pytest.raises(BadInput, match=message + r".*\(rule: a new file's destinations are absent at HEAD and in the "
                                                 r"working tree\)"):
        _freeze(repo, _with_new_file(tmp_path))
    assert not (repo / "results/freeze/manifest.json").exists()


def test_an_uncommitted_file_in_the_canonical_skill_is_refused_as_part_of_the_family(repo, tmp_path):
    """The canonical skill is read whole (what the bench measured): an untracked file there is no new file but one
    with no committed base, and a symlink is refused by the family reader."""
    _allow_supporting_files(repo)
    (repo / "skills/work/reference").mkdir()
    (repo / f"skills/{NEW}").write_text("a draft nobody committed\n")
    with pytest.raises(BadInput, match=rf"repo/skills/{NEW}: has no committed base at HEAD .*\(rule: apply replaces "
                                       r"committed files only\)"):
        _freeze(repo, _with_new_file(tmp_path))
    (repo / f"skills/{NEW}").unlink()
    (repo / f"skills/{NEW}").symlink_to("/nonexistent")
    with pytest.raises(BadInput, match=rf"repo/skills/{NEW}: is a symlink \(rule: no symlinks\)"):
        _freeze(repo, _with_new_file(tmp_path / "again"))


# ------------------------------------------------------------------------- rejected candidates (skillevo.core.memory)

INCUMBENT = (ROOT / "skills/work/SKILL.md").read_text()
WITHOUT = "".join(line for line in INCUMBENT.splitlines(True) if WASTEFUL not in line)  # the change the gate rejected


def _memory(repo: Path, tmp_path: Path, decision: str = "keep_incumbent", text: str = WITHOUT,
            digest: str | None = None) -> Path:
    """previous/memory/rejected.json holding one candidate of generation 3: `text` as work/SKILL.md."""
    executables: set[str] = set()
    family = layout.read_family(repo / "skills", frozenset(), executables)
    entry = memory.entry(3, digest or layout.tree_digest(family, executables), family, executables,
                         {"work/SKILL.md": text.encode()}, set(),
                         [{"candidate_arm": "candidate_auto", "decision": "insufficient_evidence", "reasons": ["few"]},
                          {"candidate_arm": "candidate_workflow", "decision": decision, "reasons": ["no cheaper"]}])
    path = tmp_path / "previous/memory/rejected.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(memory.dump([entry]))
    return path


def _lines_edited(text: str, edit) -> str:
    """`text` with `edit` applied to the line after the removed one (the change stays the removal)."""
    lines = text.splitlines(True)
    i = next(n for n, line in enumerate(lines) if line.startswith("- Read each file"))
    lines[i] = edit(lines[i])
    return "".join(lines)


EVASIONS = {
    "none": lambda t: t,
    "an added space": lambda t: _lines_edited(t, lambda line: line.replace("each file", "each  file")),
    "a trailing space": lambda t: _lines_edited(t, lambda line: line.rstrip("\n") + " \n"),
    "a trailing newline": lambda t: t + "\n",
    "a blank line": lambda t: _lines_edited(t, lambda line: line + "\n"),
    "CRLF": lambda t: t.replace("\n", "\r\n"),
    "a case change": lambda t: _lines_edited(t, lambda line: line.replace("Read each", "READ each")),
    "a zero-width space": lambda t: _lines_edited(t, lambda line: line.replace("each", "ea\u200bch")),
    "a no-break space": lambda t: _lines_edited(t, lambda line: line.replace("each file", "each\u00a0file")),
    "a fullwidth letter": lambda t: _lines_edited(t, lambda line: line.replace("Read", "\uff32ead")),
    "emphasis": lambda t: _lines_edited(t, lambda line: line.replace("each file", "**each file**")),
    "another list marker": lambda t: _lines_edited(t, lambda line: "* " + line[2:]),
    "a trailing period dropped": lambda t: _lines_edited(t, lambda line: line.replace("it.\n", "it\n")),
}


@pytest.mark.parametrize("evasion", sorted(EVASIONS))
def test_a_futile_candidate_is_refused_again_however_its_bytes_are_dressed(repo, tmp_path, evasion):
    rejected = _memory(repo, tmp_path)
    text = EVASIONS[evasion](WITHOUT)
    assert evasion == "none" or text != WITHOUT
    ov = _overlay(tmp_path, text)
    with pytest.raises(overlay.OverlayRefused) as refused:
        freeze(ov, params=config.load(repo / "params.yaml"), tasks_file=repo / "tasks/tasks.yaml", repo=repo,
               out=repo / "results/freeze", session=None, rejected=rejected)
    message = str(refused.value)
    assert f"overlay file {ov / 'work/SKILL.md'}:" in message
    assert "generation 3's candidate" in message and "candidate_workflow: keep_incumbent" in message
    assert str(rejected) in message and message.endswith("(rule: no futile re-proposal)")
    assert not (repo / "results/freeze/manifest.json").exists()


@pytest.mark.parametrize("case", ["insufficient evidence only", "another incumbent", "another change",
                                  "no memory yet"])
def test_what_may_come_back_is_frozen(repo, tmp_path, case):
    rejected = {"insufficient evidence only": lambda: _memory(repo, tmp_path, decision="insufficient_evidence"),
                "another incumbent": lambda: _memory(repo, tmp_path, digest="3" * 64),
                "another change": lambda: _memory(repo, tmp_path, text=INCUMBENT.replace(
                    "- End with two or three sentences on what changed and why.\n", "")),
                "no memory yet": lambda: tmp_path / "previous/memory/rejected.json"}[case]()
    manifest = freeze(_overlay(tmp_path, EVASIONS["CRLF"](WITHOUT)), params=config.load(repo / "params.yaml"),
                      tasks_file=repo / "tasks/tasks.yaml", repo=repo, out=repo / "results/freeze", session=None,
                      rejected=rejected)
    assert manifest["files"][0]["path"] == "work/SKILL.md"


def test_normal_form_keeps_what_changes_the_instruction():
    base = "- Read each file you are about to change before you change it.\n"
    assert memory.normal_lines(base) == memory.normal_lines("\ufeff* **Read** each  file you are about to change "
                                                           "before you change it\r\n\r\n")
    for different in ("- Read each file you are about to change.\n", "- Skim each file you are about to change "
                      "before you change it.\n", "- Read each file_name you are about to change before you change "
                      "it.\n", "Read each file you are about to change before you change it.\n"):
        assert memory.normal_lines(different) != memory.normal_lines(base), different
    family = {"work/SKILL.md": base.encode()}
    assert memory.normalised_diff(family, (), {"work/SKILL.md": base.encode()}, {"work/SKILL.md"}) == \
        [["work/SKILL.md", True, []]]  # an execute bit flipped is a change of its own


def test_the_stage_reads_the_memory_that_dvc_yaml_names(repo, tmp_path):
    from skillevo.stages import freeze as stage

    rejected = _memory(repo, tmp_path)
    ov = _overlay(tmp_path, EVASIONS["a case change"](WITHOUT))
    argv = ["--overlay", str(ov), "--hand-written", "--tasks", str(repo / "tasks/tasks.yaml"), "--params",
            str(repo / "params.yaml"), "--skills", "skills", "--mirrors", ".claude/skills",
            "--repo", str(repo), "--out", str(repo / "results/freeze")]
    assert stage.main([*argv, "--previous", str(rejected.parent)]) == 2
    assert stage.main([*argv, "--previous", str(tmp_path / "nothing-handed-on")]) == 0


def test_the_proposal_s_prediction_is_bound_in_the_manifest(repo, tmp_path):
    """Issue 33, item 2: the figure the gate will score is the one freeze read, bound with the overlay."""
    manifest = freeze(_overlay(tmp_path), params=config.load(repo / "params.yaml"),
                      tasks_file=repo / "tasks/tasks.yaml", repo=repo, out=repo / "results/freeze", session=None,
                      predicted=12.5)
    assert manifest["prediction_pct"] == 12.5
    assert json.loads((repo / "results/freeze/manifest.json").read_text())["prediction_pct"] == 12.5
    assert "prediction_pct" not in _freeze(repo, _overlay(tmp_path))  # none given: none bound (no figure invented)
