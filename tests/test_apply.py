"""Apply: a promoted overlay lands on skills/ and every mirror as one transaction, or nothing changes.

Refusals leave every file as it was; injected failures, signals and SIGKILL leave originals or a recovery
record a rerun restores from; an edit racing the apply is never lost. Apply trusts nothing but the evidence
anchored in dvc.lock: an output edited without re-recording it is refused by the anchor, and an edit someone
did re-record (a forged row, a promotion rebuilt by hand, moved timestamps) by the evidence itself.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from skillevo.apply import (
    ApplyRefused,
    RollbackIncomplete,
    RolledBack,
    apply_promotion,
    revert,
)
from skillevo.apply import fs as apply_fs
from skillevo.files.digests import sha256_bytes
from skillevo.files.errors import BrokenEnvironment
from skillevo.gate.promotion import recompute_decisions
from skillevo.stages import apply as stage
from tests.apply_fixtures import (
    APPLY_AT,
    CREATED,
    CREATED_DIRS,
    CREATING,
    DESTINATIONS,
    GATE,
    KEEPING,
    MODEL_NAME,
    NOW,
    ORIGINAL,
    OVERLAY,
    REFERENCE_BYTES,
    Pipeline,
    git,
    make_pipeline,
    skill_file,
)

ROOT = Path(__file__).resolve().parents[1]
N = len(DESTINATIONS)


@pytest.fixture
def pipe(tmp_path: Path) -> Pipeline:
    return make_pipeline(tmp_path)


def run(pipe: Pipeline, **kw):
    return apply_promotion(pipe.paths, now=kw.pop("now", APPLY_AT), **kw)


def assert_clean(pipe: Pipeline, files: dict[str, bytes]) -> None:
    """These bytes in place, no temp file beside any destination, no pending recovery record."""
    assert pipe.read() == files
    assert pipe.leftovers() == []
    assert pipe.records() == []


def test_a_promoted_generation_applies_and_a_second_apply_is_refused(pipe: Pipeline):
    (pipe.repo / ".claude/skills/plan/SKILL.md").chmod(0o640)
    modes = {rel: os.stat(pipe.repo / rel).st_mode for rel in DESTINATIONS}
    head = git(pipe.repo, "rev-parse", "HEAD")

    outcome = run(pipe)

    assert_clean(pipe, pipe.applied())
    assert {rel: os.stat(pipe.repo / rel).st_mode for rel in DESTINATIONS} == modes
    receipt = json.loads(pipe.paths.receipt.read_text())
    assert receipt["promotion_sha256"] == sha256_bytes(pipe.paths.promotion.read_bytes())
    assert receipt["overlay_digest"] == pipe.manifest["overlay_digest"]
    assert receipt["applied_at"] == APPLY_AT.isoformat()
    assert receipt["swap"] == "renameat2-exchange"
    assert receipt["files"] == [  # the modes are kept: no file here carries an execute bit
        {"path": rel, "before_sha256": sha256_bytes(pipe.originals()[rel]), "after_sha256": sha256_bytes(data),
         "before_mode": modes[rel] & 0o7777, "after_mode": modes[rel] & 0o7777}
        for rel, data in pipe.applied().items()
    ]
    for before in ORIGINAL.values():  # what revert restores from
        assert (pipe.paths.originals / sha256_bytes(before)).read_bytes() == before
    summary = outcome.summary()
    for text in (*DESTINATIONS, "git diff --stat", "4 files changed", "review", "run your checks", "commit",
                 "never commits or pushes", "no stage was re-run"):
        assert text in summary, text
    assert git(pipe.repo, "rev-parse", "HEAD") == head  # never commits
    assert git(pipe.repo, "diff", "--cached", "--name-only") == ""  # nor stages

    with pytest.raises(ApplyRefused, match="^already applied"):
        run(pipe)
    assert_clean(pipe, pipe.applied())


def test_revert_puts_the_pre_apply_bytes_back(pipe: Pipeline):
    run(pipe)
    outcome = revert(pipe.paths, now=APPLY_AT)
    assert_clean(pipe, pipe.originals())
    assert outcome.action == "reverted" and not pipe.paths.receipt.exists()
    [retired] = pipe.paths.state_dir.glob("reverted-*.json")
    assert json.loads(retired.read_text())["reverted_at"] == APPLY_AT.isoformat()
    assert git(pipe.repo, "status", "--porcelain", "--", "skills", ".claude") == ""
    with pytest.raises(ApplyRefused, match="^no receipt"):
        revert(pipe.paths, now=APPLY_AT)
    run(pipe)  # the tree is back at its frozen state, so the same promotion applies again
    assert_clean(pipe, pipe.applied())


def test_revert_refuses_a_file_changed_since_the_apply(pipe: Pipeline):
    run(pipe)
    (pipe.repo / "skills/work/SKILL.md").write_bytes(b"reviewed and edited\n")
    with pytest.raises(ApplyRefused, match=r"^skills/work/SKILL\.md: changed since the apply"):
        revert(pipe.paths, now=APPLY_AT)
    assert pipe.read() == {**pipe.applied(), "skills/work/SKILL.md": b"reviewed and edited\n"}
    assert pipe.paths.receipt.exists()


def test_a_receipt_less_revert_is_refused(pipe: Pipeline):
    with pytest.raises(ApplyRefused, match=r"^no receipt at .*receipt\.json"):
        revert(pipe.paths, now=APPLY_AT)
    assert_clean(pipe, pipe.originals())


def test_a_receipt_apply_did_not_write_is_refused(pipe: Pipeline):
    run(pipe)
    _edit_json(pipe.paths.receipt, lambda r: r.update(note="hand-edited"))
    with pytest.raises(ApplyRefused, match=r"receipt\.json: \$: .*'note'.*not a receipt apply wrote"):
        revert(pipe.paths, now=APPLY_AT)
    assert_clean(pipe, pipe.applied())


def test_a_decision_that_is_not_promote_is_refused(tmp_path: Path):
    pipe = make_pipeline(tmp_path, candidate_costs=KEEPING)
    assert pipe.promotion["decisions"][0]["decision"] == "keep_incumbent"
    with pytest.raises(ApplyRefused, match=r"promotion\.json: decisions\[0\]\.decision: is 'keep_incumbent'"):
        run(pipe)
    assert_clean(pipe, pipe.originals())


def _edit_json(path: Path, change) -> None:
    path.chmod(0o644)
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _promotion(change):
    return lambda p: _edit_json(p.paths.promotion, change)


def _bench(change):
    """The same change to both sides' bench.json, as a bench re-run would make it."""
    return lambda p: [_edit_json(side / "bench.json", change) for side in (p.paths.incumbent_bench,
                                                                            p.paths.candidate_bench)]


def _overlay_edit(p: Pipeline) -> None:
    path = p.paths.freeze / "overlay/work/SKILL.md"
    path.chmod(0o644)
    path.write_bytes(b"# Work\n\nSomething nobody benchmarked.\n")


def _overlay_extra(p: Pipeline) -> None:
    (p.paths.freeze / "overlay/work").chmod(0o755)
    (p.paths.freeze / "overlay/work/extra.md").write_bytes(b"# extra\n")


def _model_drift(p: Pipeline) -> None:  # the bench re-ran with another model since the gate decided
    p.write_params(model={"backend": "simulator", "name": "skillevo-sim-2", "base_url": None, "effort": "medium"})
    _bench(lambda b: b["model"].update(name="skillevo-sim-2"))(p)


def _symlink_destination(p: Pipeline) -> None:  # same bytes through the link: only the link is wrong
    path = p.repo / ".claude/skills/work/SKILL.md"
    path.unlink()
    path.symlink_to("../../../skills/work/SKILL.md")


def _symlink_parent(p: Pipeline) -> None:
    shutil.rmtree(p.repo / ".claude/skills")
    (p.repo / ".claude/skills").symlink_to("../skills")


def _transcript_edit(p: Pipeline) -> None:
    path = next((p.paths.candidate_bench / "transcripts").iterdir())
    path.write_bytes(path.read_bytes().replace(b'"total_cost_usd":', b'"total_cost_usd": 0.01, "was":'))


REC, AS_IS = True, False  # the edit re-recorded in dvc.lock (as if its stage re-ran) or left as it is
# name: (change to the pipeline, re-recorded?, what the refusal must say, time of the apply)
REFUSALS = {
    "promotion missing": (
        lambda p: p.paths.promotion.unlink(), AS_IS, r"promotion\.json: missing .*run `dvc repro` first", None,
    ),
    "candidate bench.json missing": (
        lambda p: (p.paths.candidate_bench / "bench.json").unlink(), AS_IS,
        r"bench-candidate/bench\.json: missing \(the candidate bench provenance\).*run `dvc repro` first", None,
    ),
    "promotion not JSON": (
        lambda p: p.paths.promotion.write_text("{"), REC, r"promotion\.json: not valid JSON", None,
    ),
    "promotion schema-invalid": (
        _promotion(lambda d: d.update(note="trust me")), REC, r"does not match its schema: .*'note'", None,
    ),
    "bench.json missing": (
        lambda p: (p.paths.incumbent_bench / "bench.json").unlink(), AS_IS, r"bench\.json: missing .*dvc repro",
        None,
    ),
    "stale manifest digest": (
        lambda p: _edit_json(p.paths.freeze / "manifest.json", lambda m: m.update(overlay_digest="c" * 64)), REC,
        r"manifest\.json: overlay_digest cccccccccccc is not the overlay .* stale; run `dvc repro` first", None,
    ),
    "frozen overlay edited": (
        _overlay_edit, REC, r"overlay/work/SKILL\.md: sha256 \w+ is not the manifest's", None,
    ),
    "frozen overlay has an extra file": (
        _overlay_extra, REC, r"overlay/work/extra\.md: not listed in manifest\.json", None,
    ),
    "model drift": (
        _model_drift, REC, r"promotion\.json: benchmark_model: differs from what the pipeline holds now", None,
    ),
    "params model changed, bench stale": (
        lambda p: p.write_params(model={"backend": "simulator", "name": "other-1", "effort": "medium"}), AS_IS,
        rf"bench\.json: was benchmarked with model '{MODEL_NAME}' .* now says 'other-1' .* stale", None,
    ),
    "task binding drift": (
        _bench(lambda b: b["task_bindings"][0].update(verify_sha256="9" * 64)), REC,
        r"task_bindings\[0\]\.verify_sha256: differs", None,
    ),
    "policy drift": (
        lambda p: p.write_params(gate={**GATE, "min_improvement_pct": 1}), AS_IS,
        r"policy\.min_improvement_pct: differs", None,
    ),
    "expired evidence": (
        lambda p: None, AS_IS, r"evidence_expires_at: the evidence expired", NOW + timedelta(days=91),
    ),
    "evidence from the future": (
        lambda p: None, AS_IS, r"generated_at: .* is in the future", NOW - timedelta(days=1),
    ),
    "destination edited after freeze": (
        lambda p: (p.repo / "skills/work/SKILL.md").write_bytes(b"a local edit\n"), AS_IS,
        r"^skills/work/SKILL\.md: edited after freeze", None,
    ),
    "mirror missing on disk": (
        lambda p: (p.repo / ".claude/skills/work/SKILL.md").unlink(), AS_IS,
        r"^\.claude/skills/work/SKILL\.md: does not exist", None,
    ),
    "mirror missing from the manifest": (
        lambda p: p.write_params(mirrors=[".claude/skills", "plugin/skills"]), AS_IS,
        r"destinations lack plugin/skills/plan/SKILL\.md", None,
    ),
    "manifest destination no mirror implies": (
        lambda p: p.write_params(mirrors=[]), AS_IS, r"destination \.claude/skills/plan/SKILL\.md is not implied",
        None,
    ),
    "destination is a symlink": (
        _symlink_destination, AS_IS, r"^\.claude/skills/work/SKILL\.md: destination is a symlink", None,
    ),
    "destination's parent is a symlink": (_symlink_parent, AS_IS, r"^\.claude/skills: is a symlink", None),
    # the same kinds of edit, not re-recorded: the anchor refuses them before anything is re-read
    "dvc.lock missing": (
        lambda p: (p.repo / "dvc.lock").unlink(), AS_IS, r"dvc\.lock: missing; apply checks the pipeline's outputs",
        None,
    ),
    "promotion edited, not re-recorded": (
        _promotion(lambda d: d.update(note="trust me")), AS_IS,
        r"promotion\.json: changed since `dvc repro` recorded it in dvc\.lock", None,
    ),
    "manifest edited, not re-recorded": (
        lambda p: _edit_json(p.paths.freeze / "manifest.json", lambda m: m.update(overlay_digest="c" * 64)), AS_IS,
        r"freeze/manifest\.json: changed since `dvc repro` recorded results/freeze in dvc\.lock", None,
    ),
    "frozen overlay edited, not re-recorded": (
        _overlay_edit, AS_IS, r"overlay/work/SKILL\.md: changed since `dvc repro` recorded results/freeze", None,
    ),
    "frozen overlay extra file, not re-recorded": (
        _overlay_extra, AS_IS, r"overlay/work/extra\.md: is new since `dvc repro` recorded results/freeze", None,
    ),
    "incumbent bench.json edited, not re-recorded": (
        _bench(lambda b: b["task_bindings"][0].update(verify_sha256="9" * 64)), AS_IS,
        r"bench-incumbent/bench\.json: changed since `dvc repro` recorded results/bench-incumbent", None,
    ),
    "candidate transcript edited, not re-recorded": (
        _transcript_edit, AS_IS,
        r"bench-candidate/transcripts/[^:]+: changed since `dvc repro` recorded results/bench-candidate", None,
    ),
    "candidate results removed, not re-recorded": (
        lambda p: (p.paths.candidate_bench / "results.jsonl").unlink(), AS_IS,
        r"bench-candidate/results\.jsonl: is missing since `dvc repro` recorded results/bench-candidate", None,
    ),
    "a side dvc.lock does not record": (
        lambda p: (p.repo / "dvc.lock").write_text((p.repo / "dvc.lock").read_text().replace(
            "path: results/bench-candidate", "path: results/bench-elsewhere")), AS_IS,
        r"bench-candidate: dvc\.lock records no output results/bench-candidate", None,
    ),
}


def _snapshot(repo: Path) -> dict[str, object]:
    return {rel: os.readlink(repo / rel) if (repo / rel).is_symlink() else (repo / rel).read_bytes()
            for rel in DESTINATIONS if os.path.lexists(repo / rel)}


def refused(pipe: Pipeline, message: str, now=None) -> None:
    """Apply is refused with `message`, and changed nothing: destinations, receipt, temp files, records."""
    before = _snapshot(pipe.repo)
    with pytest.raises(ApplyRefused, match=message):
        run(pipe, now=now or APPLY_AT)
    assert _snapshot(pipe.repo) == before
    assert not pipe.paths.receipt.exists() and pipe.leftovers() == [] and pipe.records() == []


@pytest.mark.parametrize("name", REFUSALS)
def test_refusals_name_the_reason_and_change_nothing(pipe: Pipeline, name: str):
    change, rerecorded, message, now = REFUSALS[name]
    change(pipe)
    if rerecorded:
        pipe.record()
    refused(pipe, message, now)


# --- forgeries someone re-recorded in dvc.lock: the evidence itself refuses them --------------------------


def _rows(side: Path) -> list[dict]:
    return [json.loads(line) for line in (side / "results.jsonl").read_text().splitlines()]


def test_a_forged_row_is_refused_by_its_transcript(pipe: Pipeline):
    rows = _rows(pipe.paths.candidate_bench)
    rows[0]["cost_usd"] = 0.01
    (pipe.paths.candidate_bench / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pipe.record()
    refused(pipe, r"bench-candidate/results\.jsonl: row greet/candidate_workflow/run1: cost_usd is 0\.01 but its "
                  r"transcripts say 0\.5")


def test_a_promotion_rebuilt_by_hand_does_not_follow_from_the_evidence(tmp_path: Path):
    pipe = make_pipeline(tmp_path, candidate_costs=KEEPING)
    assert pipe.promotion["decisions"][0]["decision"] == "keep_incumbent"

    def rescale(doc):
        for decision in doc["decisions"]:
            for row in decision["tasks"]:
                row["candidate"]["cost_usd"] = round(row["candidate"]["cost_usd"] * 0.5, 6)
                for sample in row["candidate"]["samples"]:
                    sample["cost_usd"] = round(sample["cost_usd"] * 0.5, 6)
        doc["decisions"] = recompute_decisions(doc)  # self-consistent: the embedded recompute agrees
        assert [d["decision"] for d in doc["decisions"]] == ["promote"]

    _edit_json(pipe.paths.promotion, rescale)
    pipe.record()
    refused(pipe, r"promotion\.json: \$\.decisions\[0\]\..*: the stored promotion does not follow from the evidence "
                  r"as it is now")


def test_moved_timestamps_do_not_revive_expired_evidence(pipe: Pipeline):
    def move(doc):
        for key in ("generated_at", "evidence_expires_at"):
            doc[key] = (datetime.fromisoformat(doc[key]) + timedelta(days=60)).isoformat()

    _edit_json(pipe.paths.promotion, move)
    pipe.record()
    refused(pipe, r"promotion\.json: \$\.evidence_expires_at: the stored promotion does not follow from the evidence",
            now=NOW + timedelta(days=100))


def _edit_tasks(pipe: Pipeline, change) -> None:
    doc = yaml.safe_load(pipe.paths.tasks.read_text())
    change(doc["tasks"])
    pipe.paths.tasks.write_text(yaml.safe_dump(doc))


def test_a_task_prompt_changed_after_the_bench_is_refused(pipe: Pipeline):
    _edit_tasks(pipe, lambda tasks: tasks[0].update(prompt="make the greeting say goodbye"))  # tasks/: not recorded
    refused(pipe, r"promotion\.json: task_bindings\[0\]\.prompt_sha256: task 'greet' is not bound as it was "
                  r"benchmarked")


def test_an_oracle_changed_after_the_bench_is_refused(pipe: Pipeline):
    oracle = pipe.paths.tasks.parent / "oracles/test_greet_oracle.py"
    oracle.write_text(oracle.read_text() + "\n\ndef test_more():\n    assert True\n")
    refused(pipe, r"task_bindings\[0\]\.oracle_files\[0\]\.sha256: task 'greet' is not bound as it was benchmarked")


def test_a_benchmarked_task_that_no_longer_exists_is_refused(pipe: Pipeline):
    _edit_tasks(pipe, lambda tasks: tasks.pop())
    refused(pipe, r"task_bindings\[1\]: task 'cheat' was benchmarked but is no longer in .*tasks\.yaml")


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP])
def test_without_an_atomic_exchange_apply_refuses_before_any_file_changed(pipe: Pipeline, monkeypatch, code: int):
    """No non-atomic fallback: an edit racing a link-and-replace could be lost, so the filesystem is unfit."""
    def unsupported(*args):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(apply_fs, "renameat2", unsupported)
    with pytest.raises(BrokenEnvironment, match=r"^\.claude/skills/plan/SKILL\.md: this filesystem cannot swap "
                                                r"files atomically .* will not replace them non-atomically.*"
                                                r"nothing was changed"):
        run(pipe)
    assert BrokenEnvironment.exit_code == 69
    assert_clean(pipe, pipe.originals())
    assert not pipe.paths.receipt.exists()


def test_a_destination_without_the_exchange_after_others_had_it_is_rolled_back(pipe: Pipeline, monkeypatch):
    """A mirror on another filesystem: the swaps already made are exchanged back before the refusal."""
    real, calls = apply_fs.renameat2, []

    def third_unsupported(*args):
        calls.append(args)
        if len(calls) == 3:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real(*args)

    monkeypatch.setattr(apply_fs, "renameat2", third_unsupported)
    with pytest.raises(BrokenEnvironment, match=f"^{DESTINATIONS[2]}: this filesystem cannot swap files atomically"
                                                ".*the 2 file\\(s\\) already swapped are back as they were"):
        run(pipe)
    assert_clean(pipe, pipe.originals())
    assert not pipe.paths.receipt.exists()


def test_the_stage_exits_69_without_an_atomic_exchange(pipe: Pipeline, monkeypatch, capsys):
    def unsupported(*args):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(apply_fs, "renameat2", unsupported)
    assert stage.main(pipe.cli_args()) == 69
    err = capsys.readouterr().err
    assert err.startswith("apply: environment: ") and "cannot swap files atomically" in err
    assert_clean(pipe, pipe.originals())


@pytest.mark.parametrize("k", range(N + 1))
def test_a_failure_after_k_of_n_swaps_leaves_every_original(pipe: Pipeline, k: int):
    def fault(event, index, path):
        if (k == 0 and event == "before-swap") or (event == "after-swap" and index == k - 1):
            raise OSError(errno.EIO, "injected failure")

    with pytest.raises(RolledBack, match=f"injected failure.*after {k} of {N} swaps.*rolled back"):
        run(pipe, fault=fault)
    assert_clean(pipe, pipe.originals())
    assert not pipe.paths.receipt.exists()


def test_a_failure_writing_the_receipt_rolls_back(pipe: Pipeline):
    pipe.paths.receipt.mkdir(parents=True)  # os.replace onto a directory fails
    with pytest.raises(RolledBack, match=f"after {N} of {N} swaps"):
        run(pipe)
    assert_clean(pipe, pipe.originals())


def test_a_failed_rollback_writes_a_recovery_record_a_rerun_restores_from(pipe: Pipeline):
    stuck = DESTINATIONS[1]

    def fault(event, index, path):
        if event == "after-swap" and index == 2:
            raise OSError(errno.EIO, "injected failure")
        if event == "before-restore" and path == stuck:
            raise OSError(errno.EIO, "restore failed too")

    with pytest.raises(RollbackIncomplete, match="restore failed too") as failed:
        run(pipe, fault=fault)
    record = failed.value.record
    assert str(record) in str(failed.value) and pipe.records() == [record]
    assert pipe.read() == {**pipe.originals(), stuck: pipe.applied()[stuck]}
    doc = json.loads(record.read_text())
    assert doc["state"] == "rollback-incomplete" and "injected failure" in doc["failure"]
    entry = next(f for f in doc["files"] if f["path"] == stuck)
    assert entry["state"] == "restore-failed" and entry["new_at"] == stuck
    assert (pipe.repo / entry["original_at"]).read_bytes() == pipe.originals()[stuck]
    assert Path(entry["original_copy"]).read_bytes() == pipe.originals()[stuck]

    logged = []
    with pytest.raises(ApplyRefused, match="^no receipt"):  # recovery runs first, then revert refuses as usual
        revert(pipe.paths, now=APPLY_AT, log=logged.append)
    assert any("recovered from" in line for line in logged)
    assert_clean(pipe, pipe.originals())
    run(pipe)
    assert_clean(pipe, pipe.applied())


def test_a_recovery_record_of_the_former_link_and_replace_swap_is_still_restored(pipe: Pipeline):
    """Records written before the non-atomic fallback was removed kept the original under `link`."""
    target, tx = DESTINATIONS[0], "0123456789abcdef"
    original, new = pipe.originals()[target], pipe.applied()[target]
    parent = (pipe.repo / target).parent
    (parent / f"{apply_fs.TEMP_PREFIX}{tx}-0.orig").write_bytes(original)
    (pipe.repo / target).write_bytes(new)
    rel = target.rsplit("/", 1)[0]
    pipe.paths.state_dir.mkdir(parents=True)
    record = pipe.paths.state_dir / "recovery-20250302T000000000000Z.json"
    record.write_text(json.dumps({
        "schema_version": 1, "kind": "apply", "transaction": tx, "repo": str(pipe.repo.resolve()),
        "started_at": APPLY_AT.isoformat(), "state": "in-progress", "failure": None, "rollback_failures": [],
        "commit": {"path": str(pipe.paths.receipt.resolve()), "key": "transaction", "then_remove": None,
                   "then_remove_transaction": None},
        "files": [{"path": target, "state": "swapped", "original_sha256": sha256_bytes(original),
                   "new_sha256": sha256_bytes(new), "original_at": f"{rel}/{apply_fs.TEMP_PREFIX}{tx}-0.orig",
                   "new_at": target, "original_copy": str(pipe.paths.originals.resolve() / sha256_bytes(original)),
                   "staged": f"{rel}/{apply_fs.TEMP_PREFIX}{tx}-0.swap",
                   "link": f"{rel}/{apply_fs.TEMP_PREFIX}{tx}-0.orig"}],
    }))
    logged = []
    with pytest.raises(ApplyRefused, match="^no receipt"):
        revert(pipe.paths, now=APPLY_AT, log=logged.append)
    assert any("recovered from" in line for line in logged)
    assert_clean(pipe, pipe.originals())


def test_an_edit_racing_the_swap_is_put_back(pipe: Pipeline):
    target = DESTINATIONS[1]

    def fault(event, index, path):  # after the last re-check, before the swap itself
        if event == "before-swap" and path == target:
            (pipe.repo / target).write_bytes(b"someone else's edit\n")

    with pytest.raises(RolledBack, match=f"{target}: was edited between the last check and the swap"):
        run(pipe, fault=fault)
    assert_clean(pipe, {**pipe.originals(), target: b"someone else's edit\n"})


def test_an_edit_during_apply_is_detected_before_its_swap(pipe: Pipeline):
    target = DESTINATIONS[2]

    def fault(event, index, path):
        if event == "after-swap" and index == 0:
            (pipe.repo / target).write_bytes(b"someone else's edit\n")

    with pytest.raises(RolledBack, match=f"{target}: changed during apply"):
        run(pipe, fault=fault)
    assert_clean(pipe, {**pipe.originals(), target: b"someone else's edit\n"})


def test_an_edit_of_a_swapped_file_is_kept_not_rolled_over(pipe: Pipeline):
    target = DESTINATIONS[0]

    def fault(event, index, path):
        if event == "after-swap" and index == 1:
            (pipe.repo / target).write_bytes(b"edited on top of the new bytes\n")

    with pytest.raises(RollbackIncomplete, match=f"{target}: was edited after the swap; left as is"):
        run(pipe, fault=fault)
    assert pipe.read() == {**pipe.originals(), target: b"edited on top of the new bytes\n"}
    with pytest.raises(ApplyRefused, match=f"{target} holds bytes .* neither its original .* cp "):
        run(pipe)  # recovery refuses to overwrite it and says how to finish by hand
    assert (pipe.repo / target).read_bytes() == b"edited on top of the new bytes\n"


def _spawn(pipe: Pipeline, pause: str, *extra: str) -> subprocess.Popen:
    """The stage as a process that stops at `pause` (event:index); returns once it is there."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.apply_pause", pause, *pipe.cli_args(), *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "test pause at" in line:
            return proc
    proc.wait()
    pytest.fail(f"the stage never reached {pause}: {''.join(seen)}{proc.stdout.read()}")


def _stage(pipe: Pipeline, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skillevo.stages.apply", *pipe.cli_args(), *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_sigkill_mid_apply_leaves_a_record_a_rerun_restores_from(pipe: Pipeline):
    proc = _spawn(pipe, "after-swap:1")
    proc.kill()
    proc.wait()
    [record] = pipe.records()
    assert pipe.read() == {**pipe.originals(), **{rel: pipe.applied()[rel] for rel in DESTINATIONS[:2]}}
    states = {f["path"]: f["state"] for f in json.loads(record.read_text())["files"]}
    assert states == {rel: "swapped" if i < 2 else "staged" for i, rel in enumerate(DESTINATIONS)}

    result = _stage(pipe, "--revert")
    assert result.returncode == 2, result.stderr
    assert "recovered from" in result.stderr and "revert: refused: no receipt" in result.stderr
    assert_clean(pipe, pipe.originals())
    result = _stage(pipe)
    assert result.returncode == 0, result.stderr
    assert_clean(pipe, pipe.applied())


def test_sigkill_after_the_commit_keeps_the_apply(pipe: Pipeline):
    proc = _spawn(pipe, f"committed:{N}")
    proc.kill()
    proc.wait()
    assert pipe.paths.receipt.exists() and pipe.records() != [] and pipe.leftovers() != []
    result = _stage(pipe)
    assert result.returncode == 2 and "had committed" in result.stderr
    assert "apply: refused: already applied" in result.stderr
    assert_clean(pipe, pipe.applied())


def test_sigterm_rolls_back(pipe: Pipeline):
    proc = _spawn(pipe, "after-swap:2")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 3
    stderr = proc.stderr.read()
    assert stderr.startswith("apply: rolled back: interrupted by SIGTERM") and "after 3 of 4 swaps" in stderr
    assert_clean(pipe, pipe.originals())


def test_the_stage_exit_codes_and_messages(pipe: Pipeline, capsys):
    assert stage.main(pipe.cli_args()) == 0
    out = capsys.readouterr().out
    assert "apply: applied 4 file(s)" in out and "next steps:" in out
    assert stage.main(pipe.cli_args()) == 2
    assert capsys.readouterr().err.startswith("apply: refused: already applied")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the transaction's handlers are gone
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert stage.main([*pipe.cli_args(), "--revert"]) == 0
    reverted = capsys.readouterr().out  # a revert speaks as one, and asks for no review (issue 32, rough edges)
    assert "revert: restored 4 file(s)" in reverted and "nothing to review" in reverted
    assert "apply:" not in reverted and "next steps" not in reverted
    assert stage.main([*pipe.cli_args(), "--revert"]) == 2
    assert capsys.readouterr().err.startswith("revert: refused: no receipt")
    assert stage.main([*pipe.cli_args(), "--now", "2025-03-02T00:00:00"]) == 2
    assert "needs a UTC offset" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        stage.main(["--help"])
    help_text = capsys.readouterr().out
    for text in ("--promotion", "--freeze", "--incumbent-bench", "--candidate-bench", "--tasks", "--receipt",
                 "--revert", "exit status", "recovery-"):
        assert text in help_text


def test_the_stage_takes_the_family_directories_from_the_command_line(pipe: Pipeline, capsys):
    assert stage.main([*pipe.cli_args(), "--skills", "skills", "--mirrors"]) == 2  # as dvc.yaml passes them
    assert "destination .claude/skills/plan/SKILL.md is not implied" in capsys.readouterr().err
    assert_clean(pipe, pipe.originals())
    assert stage.main([*pipe.cli_args(), "--skills", "./skills/", "--mirrors", ".claude/skills"]) == 0
    assert_clean(pipe, pipe.applied())


def test_outside_a_git_repository_the_diff_is_skipped(pipe: Pipeline):
    shutil.rmtree(pipe.repo / ".git")
    assert "no diff shown" in run(pipe).summary()
    assert_clean(pipe, pipe.applied())


# --- new files (params propose.allow: supporting-files): created where nothing is, removed by rollback and revert ---


@pytest.fixture
def creating(tmp_path: Path) -> Pipeline:
    """Four replacements and two creations (a reference file in a directory neither root has yet)."""
    return make_pipeline(tmp_path, overlay=CREATING, allow=("supporting-files",))


def _as_applied(before: dict[str, object]) -> dict[str, object]:
    """The tree `before` as a successful apply of CREATING leaves it."""
    after = {**before, **{rel: (OVERLAY[skill_file(rel)], before[rel][1]) for rel in DESTINATIONS}}
    after.update({rel: ("dir", 0o755 & ~_umask()) for rel in CREATED_DIRS})
    after.update({rel: (REFERENCE_BYTES, 0o644) for rel in CREATED})
    return after


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_new_reference_file_is_created_in_every_root_and_revert_removes_it(creating: Pipeline):
    pipe = creating
    assert {rel: pipe.manifest["destinations"][rel] for rel in CREATED} == dict.fromkeys(CREATED)  # bound absent
    before = pipe.tree()
    assert not any(os.path.lexists(pipe.repo / rel) for rel in CREATED_DIRS)

    outcome = run(pipe)

    assert pipe.tree() == _as_applied(before)
    assert pipe.leftovers() == [] and pipe.records() == []
    receipt = json.loads(pipe.paths.receipt.read_text())
    assert receipt["swap"] == "renameat2-exchange+noreplace"
    assert receipt["created_dirs"] == CREATED_DIRS
    created = [f for f in receipt["files"] if f["path"] in CREATED]
    assert created == [{"path": rel, "before_sha256": None, "after_sha256": sha256_bytes(REFERENCE_BYTES),
                        "before_mode": None, "after_mode": 0o644} for rel in CREATED]
    summary = outcome.summary()
    assert f"{CREATED[0]}  (new) -> {sha256_bytes(REFERENCE_BYTES)[:12]}" in summary
    assert f"new, untracked (git status shows them, git diff does not): {' '.join(CREATED)}" in summary
    status = git(pipe.repo, "status", "--porcelain", "--untracked-files=all", "--", "skills", ".claude")
    assert sorted(line[3:] for line in status.splitlines() if line.startswith("??")) == CREATED
    with pytest.raises(ApplyRefused, match="^already applied"):
        run(pipe)

    reverted = revert(pipe.paths, now=APPLY_AT)
    assert pipe.tree() == before  # the files and the directories apply created are gone, nothing else moved
    assert pipe.leftovers() == [] and pipe.records() == []
    assert f"{CREATED[0]}  {sha256_bytes(REFERENCE_BYTES)[:12]} -> (deleted)" in reverted.summary()
    assert git(pipe.repo, "status", "--porcelain", "--untracked-files=all", "--", "skills", ".claude") == ""
    run(pipe)  # absent again, so the same promotion applies again
    assert pipe.tree() == _as_applied(before)


N_CREATING = len(DESTINATIONS) + len(CREATED)


@pytest.mark.parametrize("k", range(N_CREATING + 1))
def test_a_failure_after_k_of_n_swaps_and_creations_leaves_the_tree_exactly_as_before(creating: Pipeline, k: int):
    before = creating.tree()

    def fault(event, index, path):
        if (k == 0 and event == "before-swap") or (event == "after-swap" and index == k - 1):
            raise OSError(errno.EIO, "injected failure")

    with pytest.raises(RolledBack, match=f"injected failure.*after {k} of {N_CREATING} swaps.*every file and "
                                         "directory it created is gone"):
        run(creating, fault=fault)
    assert creating.tree() == before  # no stray file, temp name or directory
    assert not creating.paths.receipt.exists() and creating.records() == []


@pytest.mark.parametrize("event", ["before-mkdir", "after-mkdir"])
@pytest.mark.parametrize("index", [0, 1])
def test_a_failure_while_making_directories_leaves_none_behind(creating: Pipeline, event: str, index: int):
    before = creating.tree()

    def fault(at, i, path):
        if at == event and i == index:
            raise OSError(errno.EIO, "injected failure")

    with pytest.raises(RolledBack, match="injected failure.*after 0 of"):
        run(creating, fault=fault)
    assert creating.tree() == before
    assert creating.records() == []


def test_a_destination_created_after_freeze_is_refused(creating: Pipeline):
    (creating.repo / ".claude/skills/work/reference").mkdir()
    (creating.repo / CREATED[0]).write_bytes(REFERENCE_BYTES)  # even the very bytes: apply never overwrites
    before = creating.tree()
    with pytest.raises(ApplyRefused, match=rf"^{re.escape(CREATED[0])}: exists, but freeze recorded it absent"):
        run(creating)
    assert creating.tree() == before and not creating.paths.receipt.exists() and creating.records() == []


@pytest.mark.parametrize("kind", ["symlink", "directory"])
def test_a_symlink_or_directory_where_a_file_is_created_is_refused(creating: Pipeline, kind: str):
    (creating.repo / ".claude/skills/work/reference").mkdir()
    target = creating.repo / CREATED[0]
    if kind == "symlink":
        target.symlink_to(creating.repo / "skills/work/SKILL.md")
    else:
        target.mkdir()
    before = creating.tree()
    with pytest.raises(ApplyRefused, match=rf"^{re.escape(CREATED[0])}: is a {kind}, where apply would create"):
        run(creating)
    assert creating.tree() == before


def test_a_symlinked_directory_on_the_way_to_a_created_file_is_refused(creating: Pipeline):
    (creating.repo / ".claude/skills/work/reference").symlink_to("../../../skills/work")
    with pytest.raises(ApplyRefused, match=r"^\.claude/skills/work/reference: is a symlink .*never follows"):
        run(creating)
    assert not (creating.repo / "skills/work/checklist.md").exists()


def test_a_file_created_by_someone_else_during_apply_is_kept_and_the_apply_rolled_back(creating: Pipeline):
    before = creating.tree()
    theirs = b"someone else's checklist\n"

    def fault(event, index, path):  # after apply's last check, before its rename
        if event == "before-swap" and path == CREATED[1]:
            (creating.repo / path).write_bytes(theirs)

    with pytest.raises(RolledBack, match=f"{re.escape(CREATED[1])}: was created by someone else during apply"):
        run(creating, fault=fault)
    assert creating.tree() == {**before, CREATED_DIRS[1]: ("dir", 0o755 & ~_umask()),
                               CREATED[1]: (theirs, 0o666 & ~_umask())}
    assert creating.records() == []


def test_a_directory_created_by_someone_else_during_apply_is_kept(creating: Pipeline):
    before = creating.tree()

    def fault(event, index, path):
        if event == "before-mkdir" and path == CREATED_DIRS[0]:
            (creating.repo / path).mkdir()
            (creating.repo / path / "notes.md").write_bytes(b"mine\n")

    with pytest.raises(RolledBack, match=f"{re.escape(CREATED_DIRS[0])}: was created by someone else during apply"):
        run(creating, fault=fault)
    assert creating.tree() == {**before, CREATED_DIRS[0]: ("dir", 0o777 & ~_umask()),
                               f"{CREATED_DIRS[0]}/notes.md": (b"mine\n", 0o666 & ~_umask())}


def test_a_created_file_edited_before_the_rollback_is_never_deleted(creating: Pipeline):
    before = creating.tree()
    edited = CREATED[0]

    def fault(event, index, path):
        if event == "after-swap" and path == DESTINATIONS[-1]:  # the last swap, after both creations
            (creating.repo / edited).write_bytes(b"edited on top of the new file\n")
            raise OSError(errno.EIO, "injected failure")

    with pytest.raises(RollbackIncomplete, match=f"{re.escape(edited)}: was edited after apply created it; left as "
                                                 "is") as failed:
        run(creating, fault=fault)
    record = json.loads(failed.value.record.read_text())
    assert next(f for f in record["files"] if f["path"] == edited)["state"] == "restore-failed"
    assert {d["path"]: d["state"] for d in record["dirs"]} == dict.fromkeys(CREATED_DIRS, "created")
    assert (creating.repo / edited).read_bytes() == b"edited on top of the new file\n"
    with pytest.raises(ApplyRefused, match=f"{re.escape(edited)} is the file the interrupted transaction created, "
                                           "but it holds other bytes .* recovery will not delete it"):
        run(creating)
    assert (creating.repo / edited).read_bytes() == b"edited on top of the new file\n"
    (creating.repo / edited).unlink()  # what the refusal asks for; the rerun then finishes the recovery
    logged = []
    with pytest.raises(ApplyRefused, match="^no receipt"):
        revert(creating.paths, now=APPLY_AT, log=logged.append)
    assert any("recovered from" in line for line in logged)
    assert creating.tree() == before and creating.records() == []


def test_without_a_no_replace_rename_apply_refuses_and_changes_nothing(creating: Pipeline, monkeypatch):
    real = apply_fs.renameat2

    def exchange_only(old_dir, old, new_dir, new, flags):
        if flags == apply_fs.RENAME_NOREPLACE:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(old_dir, old, new_dir, new, flags)

    before = creating.tree()
    monkeypatch.setattr(apply_fs, "renameat2", exchange_only)
    with pytest.raises(BrokenEnvironment, match=f"^{re.escape(CREATED_DIRS[0])}: this filesystem cannot rename "
                                                "without the risk of overwriting .*nothing was changed"):
        run(creating)
    assert creating.tree() == before


def test_a_destination_recorded_absent_but_forged_as_committed_is_refused(creating: Pipeline):
    _edit_json(creating.paths.freeze / "manifest.json",
               lambda m: m["destinations"].update({CREATED[0]: sha256_bytes(REFERENCE_BYTES)}))
    creating.record()
    refused(creating, rf"promotion\.json: destination_digests\['{re.escape(CREATED[0])}'\]: differs")


@pytest.mark.parametrize("pause", ["after-swap:2", "before-mkdir:1"])  # 1: one directory placed, one not yet
def test_sigkill_mid_apply_with_creations_leaves_a_record_a_rerun_restores_from(creating: Pipeline, pause: str):
    before = creating.tree()
    proc = _spawn(creating, pause)
    proc.kill()
    proc.wait()
    [record] = creating.records()
    doc = json.loads(record.read_text())
    if pause == "after-swap:2":  # the first creation (sorted third) is in place
        assert (creating.repo / CREATED[0]).read_bytes() == REFERENCE_BYTES
        assert next(f for f in doc["files"] if f["path"] == CREATED[0])["op"] == "create"
    assert creating.tree() != before

    result = _stage(creating, "--revert")
    assert result.returncode == 2, result.stderr
    assert "recovered from" in result.stderr and "revert: refused: no receipt" in result.stderr
    assert creating.tree() == before and creating.records() == []
    result = _stage(creating)
    assert result.returncode == 0, result.stderr
    assert creating.tree() == _as_applied(before)


def test_revert_refuses_when_a_created_file_was_edited_since(creating: Pipeline):
    run(creating)
    (creating.repo / CREATED[1]).write_bytes(b"reviewed and extended\n")
    applied = creating.tree()
    with pytest.raises(ApplyRefused, match=rf"^{re.escape(CREATED[1])}: changed since the apply .*revert will not "
                                           "delete it"):
        revert(creating.paths, now=APPLY_AT)
    assert creating.tree() == applied and creating.paths.receipt.exists()


def test_revert_keeps_a_created_directory_that_now_holds_someone_elses_file(creating: Pipeline):
    before = creating.tree()
    run(creating)
    (creating.repo / CREATED_DIRS[0] / "mine.md").write_bytes(b"mine\n")
    logged = []
    revert(creating.paths, now=APPLY_AT, log=logged.append)
    assert creating.tree() == {**before, CREATED_DIRS[0]: ("dir", 0o755 & ~_umask()),
                               f"{CREATED_DIRS[0]}/mine.md": (b"mine\n", 0o666 & ~_umask())}
    assert any(f"kept {CREATED_DIRS[0]}" in line for line in logged)


@pytest.mark.parametrize("k", range(N_CREATING + 1))
def test_a_failed_revert_puts_every_file_back_as_applied(creating: Pipeline, k: int):
    run(creating)
    applied = creating.tree()

    def fault(event, index, path):
        if (k == 0 and event == "before-swap") or (event == "after-swap" and index == k - 1):
            raise OSError(errno.EIO, "injected failure")

    with pytest.raises(RolledBack, match=f"after {k} of {N_CREATING} swaps"):
        revert(creating.paths, now=APPLY_AT, fault=fault)
    assert creating.tree() == applied and creating.paths.receipt.exists() and creating.records() == []


def test_sigkill_mid_revert_is_finished_by_a_rerun(creating: Pipeline):
    before = creating.tree()
    run(creating)
    proc = _spawn(creating, "after-swap:5", "--revert")  # both created files are taken out, not yet committed
    proc.kill()
    proc.wait()
    assert not (creating.repo / CREATED[0]).exists() and creating.records() != []
    result = _stage(creating, "--revert")  # recovery puts them back, then the revert runs whole
    assert result.returncode == 0, result.stderr
    assert "recovered from" in result.stderr
    assert creating.tree() == before and creating.records() == []


def test_sigkill_after_a_revert_commits_removes_the_directories_on_rerun(creating: Pipeline):
    before = creating.tree()
    run(creating)
    proc = _spawn(creating, f"committed:{N_CREATING}", "--revert")
    proc.kill()
    proc.wait()
    assert all((creating.repo / rel).is_dir() for rel in CREATED_DIRS)  # the revert had committed, not cleaned up
    result = _stage(creating, "--revert")
    assert result.returncode == 2 and "had committed" in result.stderr, result.stderr
    assert creating.tree() == before and creating.records() == []
