"""Execute bits: a skill's script stays runnable in every workspace, the frozen overlay and after apply; a
`chmod +x` is a different family for the digests and DVC; scripts and supporting files change only when
params propose.allow says so."""

from __future__ import annotations

import copy
import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from skillevo.apply import apply_promotion, revert
from skillevo.bench import build_cells, plan, run_cell, workspace
from skillevo.core import config, layout, models, modes, params_edit
from skillevo.files.errors import BadInput
from skillevo.simulator import Simulator, load_all
from tests.apply_fixtures import APPLY_AT, CREATING, ORIGINAL, REFERENCE, REFERENCE_BYTES, ROOTS, make_pipeline
from tests.bench_fixtures import PLAYBOOK, ROOT
from tests.test_freeze import _freeze, repo  # noqa: F401 - repo is a fixture

SCRIPT = "work/scripts/check.sh"
SCRIPT_BYTES = b"#!/bin/sh\necho checked\n"


def _add_script(repo: Path, executable: bool = True) -> None:  # noqa: F811
    for root in ("skills", ".claude/skills"):
        path = repo / root / SCRIPT
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(SCRIPT_BYTES)
        os.chmod(path, 0o755 if executable else 0o644)
    (repo / "skill-modes.json").write_bytes(modes.render({SCRIPT} if executable else set()))
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["add", "-A"], ["commit", "-qm", "a script"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_script_is_executable_in_every_workspace_and_git_records_it(repo, tmp_path):  # noqa: F811
    _add_script(repo)
    executables: set[str] = set()
    family = layout.read_family(repo / "skills", executables=executables)
    assert executables == {SCRIPT}
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree/a.py").write_text("x = 1\n")
    workspace.build_template(tmp_path / "tree", family, None, tmp_path / "tpl", executables)
    workspace.materialize(tmp_path / "tpl", tmp_path / "ws")
    script = tmp_path / "ws/.claude/skills" / SCRIPT
    assert _mode(script) == 0o755 and _mode(tmp_path / "ws/.claude/skills/work/SKILL.md") == 0o644
    assert subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout == "checked\n"
    listed = workspace.git(tmp_path / "ws", "ls-files", "-s", f".claude/skills/{SCRIPT}")
    assert listed.startswith("100755 ")


def test_an_execute_bit_changes_the_digest_and_the_bench_refuses_an_unrecorded_one(repo):  # noqa: F811
    _add_script(repo)
    params = config.load(repo / "params.yaml")
    with_bit = plan("incumbent", repo / "tasks/tasks.yaml", repo / "skills", None, params,
                    modes=repo / "skill-modes.json")
    assert with_bit.executables == {SCRIPT}
    os.chmod(repo / "skills" / SCRIPT, 0o644)  # what DVC cannot see: the bytes are the same
    with pytest.raises(BadInput, match=rf"skills/{SCRIPT}: has no execute bit, unlike .*skill-modes\.json says; "
                                       r"run `make modes`.*\(rule: modes recorded"):
        plan("incumbent", repo / "tasks/tasks.yaml", repo / "skills", None, params, modes=repo / "skill-modes.json")
    without = plan("incumbent", repo / "tasks/tasks.yaml", repo / "skills", None, params)
    assert without.skills_digest != with_bit.skills_digest


def _script_overlay(tmp_path: Path, data: bytes, executable: bool) -> Path:
    ov = tmp_path / "overlay"
    (ov / SCRIPT).parent.mkdir(parents=True, exist_ok=True)
    (ov / SCRIPT).write_bytes(data)
    os.chmod(ov / SCRIPT, 0o755 if executable else 0o644)
    return ov


def test_a_script_edit_needs_params_and_is_frozen_executable_and_flagged(repo, tmp_path):  # noqa: F811
    _add_script(repo)
    edited = SCRIPT_BYTES + b"echo twice\n"
    with pytest.raises(BadInput, match=rf"{SCRIPT}: is a script .*propose\.allow lists scripts \(rule: scripts\)"):
        _freeze(repo, _script_overlay(tmp_path, edited, True))
    params_edit.set_value(repo / "params.yaml", "propose", "allow", ["scripts"])
    manifest = _freeze(repo, _script_overlay(tmp_path / "b", edited, True))
    assert manifest["files"] == [{"path": SCRIPT, "sha256": manifest["files"][0]["sha256"], "size": len(edited),
                                  "executable": True}]
    assert manifest["script_changes"] == [f"{SCRIPT}: script edited"] and manifest["changed_lines"] == 1
    assert _mode(repo / "results/freeze/overlay" / SCRIPT) == 0o555


def test_dropping_an_execute_bit_is_a_change_counted_in_the_budget(repo, tmp_path):  # noqa: F811
    _add_script(repo)
    params_edit.set_value(repo / "params.yaml", "propose", "allow", ["scripts"])
    manifest = _freeze(repo, _script_overlay(tmp_path, SCRIPT_BYTES, False))  # same bytes, no bit
    assert manifest["changed_lines"] == 1 and manifest["script_changes"] == [f"{SCRIPT}: execute bit removed"]
    assert manifest["overlay_digest"] != _freeze(repo, _script_overlay(tmp_path / "b", SCRIPT_BYTES + b"\n", True)
                                                 )["overlay_digest"]


def test_supporting_files_need_params(repo, tmp_path):  # noqa: F811
    _add_script(repo, executable=False)  # a plain, non-Markdown supporting file
    ov = _script_overlay(tmp_path, SCRIPT_BYTES + b"# more\n", False)
    with pytest.raises(BadInput, match=r"only <skill>/<path>\.md files may be replaced .*supporting-files"):
        _freeze(repo, ov)
    params_edit.set_value(repo / "params.yaml", "propose", "allow", ["supporting-files"])
    assert _freeze(repo, ov)["script_changes"] == []
    new = tmp_path / "new"
    (new / "work/references").mkdir(parents=True)
    (new / "work/references/api.md").write_text("# API\n")
    params_edit.set_value(repo / "params.yaml", "propose", "allow", [])
    with pytest.raises(BadInput, match=r"work/references/api\.md: has no incumbent .*supporting-files lets"):
        _freeze(repo, new)
    params_edit.set_value(repo / "params.yaml", "propose", "allow", ["supporting-files"])
    manifest = _freeze(repo, new)  # bound absent: apply creates it (tests/test_apply.py)
    assert manifest["destinations"] == dict.fromkeys([".claude/skills/work/references/api.md",
                                                      "skills/work/references/api.md"])


def test_apply_writes_the_execute_bit_and_revert_restores_the_mode(tmp_path):
    original = {**ORIGINAL, SCRIPT: SCRIPT_BYTES}
    overlay = {SCRIPT: SCRIPT_BYTES + b"echo again\n"}
    pipe = make_pipeline(tmp_path, original=original, overlay=overlay, executable=frozenset(),
                         overlay_executable=frozenset({SCRIPT}), allow=("scripts", "supporting-files"))
    assert pipe.manifest["script_changes"] == [f"{SCRIPT}: execute bit added"]
    apply_promotion(pipe.paths, now=APPLY_AT)
    for root in ROOTS:
        path = pipe.repo / root / SCRIPT
        assert path.read_bytes() == overlay[SCRIPT] and _mode(path) & 0o111
        assert subprocess.run([str(path)], capture_output=True, text=True, check=True).stdout == "checked\nagain\n"
    revert(pipe.paths, now=APPLY_AT)
    for root in ROOTS:
        path = pipe.repo / root / SCRIPT
        assert path.read_bytes() == SCRIPT_BYTES and not _mode(path) & 0o111


def test_the_shipped_modes_manifest_matches_the_demo_family():
    executables: set[str] = set()
    layout.read_family(ROOT / "skills", executables=executables)
    modes.check(ROOT / "skill-modes.json", ROOT / "skills", executables)


NEW_SCRIPT = "work/scripts/lint.sh"
NEW_SCRIPT_BYTES = b"#!/bin/sh\necho linted\n"


def test_a_new_script_needs_scripts_allowed_and_is_created_executable_then_reverted(tmp_path):
    overlay = {NEW_SCRIPT: NEW_SCRIPT_BYTES}
    with pytest.raises(BadInput, match=rf"overlay file {NEW_SCRIPT}: is a script .*propose\.allow lists scripts "
                                       r"\(rule: scripts\)"):
        make_pipeline(tmp_path / "refused", overlay=overlay, overlay_executable=frozenset({NEW_SCRIPT}),
                      allow=("supporting-files",))
    pipe = make_pipeline(tmp_path, overlay=overlay, overlay_executable=frozenset({NEW_SCRIPT}),
                         allow=("scripts", "supporting-files"))
    assert pipe.manifest["script_changes"] == [f"{NEW_SCRIPT}: new script"]
    assert pipe.manifest["destinations"] == dict.fromkeys(f"{root}/{NEW_SCRIPT}" for root in ROOTS)
    before = pipe.tree()
    receipt_files = apply_promotion(pipe.paths, now=APPLY_AT).files
    assert [(f["path"], f["before_sha256"], f["after_mode"]) for f in receipt_files] == [
        (f"{root}/{NEW_SCRIPT}", None, 0o755) for root in sorted(ROOTS)]
    for root in ROOTS:
        path = pipe.repo / root / NEW_SCRIPT
        assert path.read_bytes() == NEW_SCRIPT_BYTES and _mode(path) == 0o755  # fchmod: the umask plays no part
        assert subprocess.run([str(path)], capture_output=True, text=True, check=True).stdout == "linted\n"
    revert(pipe.paths, now=APPLY_AT)
    assert pipe.tree() == before and not any((pipe.repo / root / "work/scripts").exists() for root in ROOTS)


@pytest.mark.cli
@pytest.mark.bwrap
def test_a_candidate_session_reads_the_new_file_in_its_workspace(tmp_path):
    """End to end: the candidate side lays the frozen overlay over the family, so a file the overlay adds is in
    the cell's template (committed, with its mode) and a real CLI session in the sandbox reads it there."""
    pipe = make_pipeline(tmp_path, overlay=CREATING, allow=("supporting-files",))
    params = config.load(pipe.repo / "params.yaml")
    side = plan("candidate", pipe.paths.tasks, pipe.repo / "skills", pipe.paths.freeze / "overlay", params)
    assert side.overlay_digest == pipe.manifest["overlay_digest"]
    side.tasks, side.runs = [t for t in side.tasks if t.id == "greet"], 1
    side.controls = []  # the subject is the candidate arm's template; its incumbent control is the family's own
    book = copy.deepcopy(PLAYBOOK)
    work = next(t for t in book["tasks"] if t["id"] == "greet")["sessions"]["work"]
    work.insert(0, {"read": f".claude/skills/{REFERENCE}"})
    (tmp_path / "book.yaml").write_text(yaml.safe_dump(book))
    with Simulator(load_all([tmp_path / "book.yaml"])) as sim:
        model, _ = models.resolve(params.model, sim.url())
        (tmp_path / "scratch").mkdir()
        [cell] = build_cells(side, params.bench, model, tmp_path / "scratch")
        installed = cell.template / ".claude/skills" / REFERENCE
        assert installed.read_bytes() == REFERENCE_BYTES and _mode(installed) == 0o644
        assert workspace.git(cell.template, "ls-files", "-s", f".claude/skills/{REFERENCE}").startswith("100644 ")
        result = run_cell(cell)
    transcript = b"".join(v for k, v in result.artifacts.items() if k.startswith("transcripts/")).decode()
    assert "Read the failing test before editing." in transcript  # the new file's text, as the Read tool returned it
    assert result.row["verify_passed"] is True  # the session went on to do the task
