"""The DVC pipeline as users run it: a fresh clone, `make demo`, reuse, sharing, apply (evolve and realistic noise
are in test_pipeline_evolve.py and test_pipeline_noise.py: files run on parallel workers, whole).

Each test works in a git repository holding this checkout's working tree (what `git add -A` would commit, as
one commit over HEAD) and reuses this checkout's venv and CLI (VENV/TOOLS): an uncommitted change is tested,
never passed over.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from skillevo.core import params_edit
from tests.bench_fixtures import ROOT
from tests.conftest import cmdline
from tests.worktree import clone_of_worktree

# A generation takes ~6 minutes on a quiet 2-core machine; the timeout is sized for a loaded runner.
pytestmark = [pytest.mark.cli, pytest.mark.bwrap, pytest.mark.timeout(2400)]
WASTEFUL = "Read every module of the package end to end before editing"
DVC = str(ROOT / ".venv/bin/dvc")


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1", **extra}


def run(cmd: list[str], cwd: Path, **env: str) -> str:
    out = subprocess.run(cmd, cwd=cwd, env=_env(**env), capture_output=True, text=True)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout + out.stderr


def make(clone: Path, *targets: str, **env: str) -> str:
    return run(["make", f"VENV={ROOT / '.venv'}", f"TOOLS={ROOT / '.tools'}", *targets], clone, **env)


def ran(output: str) -> set[str]:
    """The stages `dvc repro` ran, but the identity stage: it runs every time (always_changed), in milliseconds."""
    return set(re.findall(r"Running stage '([^']+)'", output)) - {"identity"}


def settled(status: str) -> bool:
    """`dvc status` has nothing to run but the identity check, which always runs (and the frozen apply's note)."""
    rest = re.sub(r"WARNING: stage: 'apply' is frozen.*\n", "", status)
    return re.sub(r"identity:\s+always changed", "", rest).strip() == ""




def sessions(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


# The module's generation is the demo with its auto arm alone (one session a run) and 3 incumbent runs a task, on
# the default schedule: looks of 6, 8, ... up to 48 candidate runs a task, the test by betting deciding at each (the
# workflow arm's generations: test_pipeline_evolve.py, test_pipeline_noise.py); CI has 30 minutes on 2 cores.
SMALL = {("sampling", "incumbent_runs"): 3}


def small_demo(clone: Path) -> None:
    doc = yaml.safe_load((clone / "params.yaml").read_text())
    doc["arms"] = {"auto": doc["arms"]["auto"]}
    for (section, key), value in SMALL.items():
        doc[section][key] = value
    (clone / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "the demo, at test size"], clone)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("pipeline")
    clone = clone_of_worktree(root / "clone")
    small_demo(clone)
    log = root / "sessions.log"
    output = make(clone, "demo", SKILLEVO_SIMULATOR_SESSION_LOG=str(log))
    return {"root": root, "clone": clone, "output": output, "sessions": sessions(log)}


def test_fresh_clone_make_demo_promotes_the_candidate_without_the_wasteful_line(demo):
    assert "decision: promote" in demo["output"]
    order = re.findall(r"Running stage '([^']+)'", demo["output"])
    assert order == ["identity", "bench@incumbent", "preflight", "evidence", "propose", "freeze", "bench@candidate",
                     "gate"]  # identity first: every stage depends on its file
    assert "preflight: 48 runs per (task, arm) on 3 gate task(s) detect a saving per resolved task of" in demo["output"]
    for side in ("incumbent", "candidate"):  # each side states its price before its first cell (issue 32, item 5)
        assert re.search(rf"bench {side}: at most \d+ sessions, about \d+ min at \d+ worker\(s\), no money "
                         r"\(simulated\)", demo["output"]), side
    promotion = json.loads((demo["clone"] / "results/gate/promotion.json").read_text())
    assert [(d["candidate_arm"], d["decision"]) for d in promotion["decisions"]] == [("candidate_auto", "promote")]
    assert promotion["backend"]["simulated"] is True
    frozen = (demo["clone"] / "results/freeze/overlay/work/SKILL.md").read_text()
    assert WASTEFUL not in frozen and WASTEFUL in (demo["clone"] / "skills/work/SKILL.md").read_text()
    # the looks stopped once the test by betting promoted, long before the schedule's 48 runs a task
    looks = json.loads((demo["clone"] / "results/bench-candidate/bench.json").read_text())["sequential"]
    assert looks["reason"] == "promote" and looks["looks"][0] == 6 and looks["looks"][-1] == 48
    stopped = looks["looks"][looks["stopped_at_look"] - 1]
    assert stopped < 24, looks
    # incumbent: 4 tasks x 3 runs x 1 session; candidate: the 3 gate tasks x the stopped look's runs, the candidate
    # arm and its control; 1 proposer
    assert demo["sessions"] == 4 * 3 + 3 * stopped * 2 + 1
    report = (demo["clone"] / "results/gate/report.md").read_text()
    assert re.search(r"candidate_auto: promote\*\* — cost_usd per resolved task \d+\.\d% cheaper \(90% interval "
                     r"\d+\.\d% to \d+\.\d%", report), report[:600]
    assert "What cheaper means" in report
    # the proposer's prediction, bound by freeze and scored by the gate beside its decision (issue 33, item 2)
    predicted = json.loads((demo["clone"] / "results/freeze/manifest.json").read_text())["prediction_pct"]
    assert f"Predicted improvement: {predicted:g}%" in (demo["clone"] / "results/proposal/proposal.md").read_text()
    assert promotion["prediction"]["improvement_pct"] == predicted and 0 < predicted < 100
    assert set(promotion["prediction"]["scores"]) == {"candidate_auto"}
    score = promotion["prediction"]["scores"]["candidate_auto"]
    assert score in ("hit", "miss", "wrong sign")  # measured: never "unmeasured" beside a promotion
    assert f"The proposer predicted {predicted:g}% cheaper per resolved task" in report and \
        f"candidate_auto: {score}." in report


def test_make_plots_writes_a_page_that_renders_without_a_network(demo):
    out = make(demo["clone"], "plots")
    page = (demo["clone"] / "results/plots/index.html").read_text()
    assert "plots: results/plots/index.html" in out
    assert not re.search(r"<script[^>]+src=", page) and "cdn." not in page  # nothing fetched when opened
    spec = json.loads(re.search(r"var spec = (\{.*?\});\n", page).group(1))
    assert spec["encoding"]["y"]["field"] == "task" and spec["encoding"]["y"]["axis"]["labelLimit"] == 0  # whole
    assert spec["encoding"]["color"]["field"] == spec["encoding"]["yOffset"]["field"] == "arm"  # arms told apart
    interval, estimate = spec["layer"][:2]  # .dvc/plots/improvement.json: each arm's interval, then its estimate
    assert (interval["encoding"]["x"]["field"], interval["encoding"]["x2"]["field"]) == ("low", "high")
    assert estimate["encoding"]["x"]["field"] == "estimate"
    # render the page's own spec with the libraries it inlines, in node with no network: an SVG with every bar
    modules = next((ROOT / ".tools").glob("vega-*/node_modules"))
    js = ("const vl=require('vega-lite'),vega=require('vega');new vega.View(vega.parse(vl.compile("
          "JSON.parse(process.argv[1])).spec),{renderer:'none'}).toSVG().then(s=>process.stdout.write(s))")
    svg = subprocess.run(["node", "-e", js, json.dumps(spec)],
                         env={"NODE_PATH": str(modules), "PATH": os.environ["PATH"]},
                         capture_output=True, text=True, check=True).stdout
    for row in spec["data"]["values"]:
        assert row["task"] in svg
    assert svg.count("<line") >= len(spec["data"]["values"])  # an interval's rule per task and arm


def test_second_repro_with_nothing_changed_runs_no_stage(demo):
    out = run([DVC, "repro"], demo["clone"])
    assert ran(out) == set() and "Running stage 'identity'" in out and "Stage 'gate' didn't change" in out


@pytest.mark.parametrize("key, value, rerun", [
    ("quality_alpha", 0.2, {"gate"}),
    ("resolution_margin", 1, {"gate"}),
    # the preflight states it, and the candidate side's looks stop by it (the gate's own knob, issue 31): both
    # benches run again, served from the cell store, as DVC must when a key their code reads changes (one
    # foreach entry: the incumbent side with the candidate's), and the evidence after the incumbent side
    ("min_improvement_pct", 6, {"preflight", "bench@incumbent", "bench@candidate", "evidence", "gate"}),
])
def test_changing_only_a_gate_threshold_reruns_what_reads_it(demo, key, value, rerun):
    params_file = demo["clone"] / "params.yaml"
    original = params_file.read_text()
    doc = yaml.safe_load(original)
    doc["gate"][key] = value
    params_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        assert ran(run([DVC, "repro"], demo["clone"])) == rerun
    finally:
        params_file.write_text(original)
    out = run([DVC, "repro"], demo["clone"])  # back to the recorded params: served by the run-cache
    assert "Stage 'gate' is cached" in out and ran(out) <= {"preflight"}  # restored, not re-run


@pytest.mark.parametrize("key, value", [("workers", 1), ("executor", "ray"), ("ray_max_retries", 5),
                                        ("max_consecutive_failures", 3), ("max_excluded_pct", 50)])
def test_changing_how_cells_run_reruns_nothing(demo, key, value):
    """Workers, the executor, Ray and the outage breaker change how a bench runs, never what a cell measures."""
    params_file = demo["clone"] / "params.yaml"
    original = params_file.read_text()
    params_edit.set_value(params_file, "bench", key, value)
    try:
        out = run([DVC, "repro"], demo["clone"])
        assert ran(out) == set() and "Stage 'gate' didn't change" in out
    finally:
        params_file.write_text(original)


def _store_keys(clone: Path) -> set[str]:
    return {p.name for p in (clone / ".skillevo/cells/v1").glob("*/*.json.gz")}


def _started(pid: int) -> str | None:
    """The start time of `pid` (/proc/<pid>/stat field 22), so that a reused pid is not taken for the old one."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _wait_gone(tree: dict[int, str | None], timeout: float = 90) -> None:
    """Wait for every process of a killed repro, wherever it was reparented (a stage's command line names no
    path of the test, so only the tree taken before the kill finds it)."""
    deadline = time.monotonic() + timeout
    alive = lambda: [pid for pid, start in tree.items() if start is not None and _started(pid) == start]  # noqa: E731
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(), f"processes of the killed repro outlived it: {[cmdline(pid) for pid in alive()]}"


@pytest.mark.parametrize("victim", ["stage", "dvc"])
def test_a_bench_killed_with_its_stage_or_its_dvc_resumes_paying_for_no_finished_cell(demo, tmp_path, victim):
    from tests.conftest import process_tree

    clone = tmp_path / "clone"
    shutil.copytree(demo["clone"], clone, symlinks=True)
    params_edit.set_value(clone / "params.yaml", "sampling", "incumbent_runs", 6)  # runs 1-3 are stored: 4-6 are new
    before = _store_keys(clone)
    # under dash, the shell that does not exec a lone command: DVC runs stage commands with $SHELL
    proc = subprocess.Popen([DVC, "repro", "bench@incumbent"], cwd=clone, env=_env(SHELL="/bin/sh"),
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while len(_store_keys(clone) - before) < 3 and time.monotonic() < deadline:
        assert proc.poll() is None, "the repro ended before it could be killed"
        time.sleep(0.05)
    tree = {pid: _started(pid) for pid in process_tree({proc.pid})}
    if victim == "dvc":
        os.kill(proc.pid, signal.SIGKILL)  # the stage learns it through PR_SET_PDEATHSIG and stops
    else:
        stage = [pid for pid in process_tree({proc.pid}) if "skillevo.stages.bench" in cmdline(pid)]
        os.kill(min(stage), signal.SIGKILL)
    proc.wait(120)
    _wait_gone(tree)
    finished = _store_keys(clone) - before
    side = clone / "results/bench-incumbent"
    assert not (side / "bench.json").exists()  # never a side that looks whole; at most the marked partial
    assert not side.exists() or (side / ".partial").is_file()
    assert "bench@incumbent" in run([DVC, "status"], clone)  # not cached: the stage never succeeded
    out = run([DVC, "repro", "bench@incumbent"], clone)
    assert "bench@incumbent" in ran(out)
    bench = json.loads((side / "bench.json").read_text())
    total = 4 * 1 * 6  # tasks x arms x runs
    assert bench["cell_store"]["paid"] == 4 * 3 - len(finished)  # only the new runs' unfinished cells
    assert bench["cell_store"]["served"] == total - bench["cell_store"]["paid"]
    rows = [json.loads(line) for line in (side / "results.jsonl").read_text().splitlines()]
    assert len(rows) == total == len({(r["task"], r["arm"], r["run"]) for r in rows})
    assert not list(side.parent.glob(".bench-incumbent.staging-*"))
    assert "bench@incumbent" not in run([DVC, "status"], clone)
    # make gc, then the configuration DVC recorded before: served by the run-cache, nothing runs or is paid
    params_edit.set_value(clone / "params.yaml", "sampling", "incumbent_runs", 3)
    assert ran(run([DVC, "repro"], clone)) <= {"preflight"}
    assert "removed" in make(clone, "gc")
    params_edit.set_value(clone / "params.yaml", "sampling", "incumbent_runs", 6)
    out = run([DVC, "repro", "bench@incumbent"], clone)
    assert ran(out) == set() and "Stage 'bench@incumbent' is cached" in out


def _reproduce_elsewhere(demo: dict, dest: Path, remote_setup: list[list[str]], **env: str) -> tuple[str, int]:
    clone = clone_of_worktree(dest)
    small_demo(clone)  # the teammate's checkout holds what the demo's did: the same params, committed
    for cmd in remote_setup:
        run([DVC, *cmd], clone, **env)
    log = dest.parent / f"{dest.name}-sessions.log"
    out = run([DVC, "repro", "--pull"], clone, SKILLEVO_SIMULATOR_SESSION_LOG=str(log), **env)
    theirs = json.loads((clone / "results/gate/promotion.json").read_text())["decisions"]
    ours = json.loads((demo["clone"] / "results/gate/promotion.json").read_text())["decisions"]
    assert theirs == ours
    return out, sessions(log)


def test_sharing_through_a_local_remote_reproduces_with_zero_sessions(demo):
    make(demo["clone"], "push")
    remote = demo["root"] / "skillevo-remote"
    assert (remote / "runs").is_dir()
    out, n = _reproduce_elsewhere(demo, demo["root"] / "teammate" / "clone",
                                  [["remote", "modify", "--local", "local", "url", str(remote)]])
    assert n == 0 and ran(out) == set()
    assert out.count("is cached - skipping run") == 7  # every stage but the frozen apply


def test_sharing_through_s3_on_moto_reproduces_with_zero_sessions(demo):
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer("127.0.0.1", 0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        boto3.client("s3", endpoint_url=url, aws_access_key_id="testing", aws_secret_access_key="testing",
                     region_name="us-east-1").create_bucket(Bucket="skillevo")
        setup = [["remote", "add", "--local", "-f", "-d", "s3", "s3://skillevo/cache"],
                 ["remote", "modify", "--local", "s3", "endpointurl", url]]
        for cmd in setup:
            run([DVC, *cmd], demo["clone"], **creds)
        run([DVC, "push", "--run-cache", "-r", "s3"], demo["clone"], **creds)
        run([DVC, "remote", "default", "--local", "local"], demo["clone"])
        out, n = _reproduce_elsewhere(demo, demo["root"] / "s3-teammate" / "clone", setup, **creds)
    finally:
        server.stop()
    assert n == 0 and ran(out) == set()


def test_apply_rewrites_skills_and_the_next_repro_reruns_the_incumbent_side(demo):
    clone = demo["clone"]
    out = make(clone, "apply")
    assert "applied 2 file(s)" in out
    for rel in ("skills/work/SKILL.md", ".claude/skills/work/SKILL.md"):
        assert (clone / rel).read_bytes() == (clone / "results/freeze/overlay/work/SKILL.md").read_bytes()
    assert "apply: refused" in subprocess.run(
        ["make", f"VENV={ROOT / '.venv'}", f"TOOLS={ROOT / '.tools'}", "apply"], cwd=clone, env=_env(),
        capture_output=True, text=True).stderr
    assert "bench@incumbent" in ran(run([DVC, "repro", "--dry"], clone))
    assert run(["git", "status", "--porcelain", "--", "skills", ".claude"], clone).strip()  # a plain diff, uncommitted
    make(clone, "revert")
    assert WASTEFUL in (clone / "skills/work/SKILL.md").read_text()


def _forge_cheaper_candidate(side: Path) -> None:
    """What a hostile editor would do between stages: every candidate session made cheaper, consistently, in
    the transcripts and in the rows that bind them by sha256, so that the results check out on their own."""
    rows = [json.loads(line) for line in (side / "results.jsonl").read_text().splitlines()]
    for row in rows:
        for meta in row["transcripts"]:
            path = side / meta["path"]
            events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            for event in events:
                if event.get("type") == "result":
                    event["total_cost_usd"] = 0.0001
            data = "".join(json.dumps(e) + "\n" for e in events).encode()
            os.chmod(path, 0o644)
            path.write_bytes(data)
            meta.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
        row["cost_usd"] = round(0.0001 * len(row["transcripts"]), 6)
    results = side / "results.jsonl"
    os.chmod(results, 0o644)
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    bench = side / "bench.json"  # without a team key, bench.json's results_sha256 is a forger's to rewrite too
    doc = json.loads(bench.read_text())
    doc["results_sha256"] = hashlib.sha256(results.read_bytes()).hexdigest()
    os.chmod(bench, 0o644)
    bench.write_text(json.dumps(doc, indent=2) + "\n")


def test_apply_refuses_results_forged_after_repro_even_with_the_gate_rerun_on_them(demo, tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(demo["clone"], clone, symlinks=True)
    _forge_cheaper_candidate(clone / "results/bench-candidate")
    out = run([DVC, "repro", "--single-item", "gate"], clone)  # the gate itself accepts the forged side
    assert "gate" in ran(out)
    before = {rel: (clone / rel).read_bytes() for rel in ("skills/work/SKILL.md", ".claude/skills/work/SKILL.md")}
    refused = subprocess.run(["make", f"VENV={ROOT / '.venv'}", f"TOOLS={ROOT / '.tools'}", "apply"], cwd=clone,
                             env=_env(), capture_output=True, text=True)
    assert refused.returncode != 0
    assert re.search(r"results/bench-candidate/\S+: changed since `dvc repro` recorded results/bench-candidate in "
                     r"dvc\.lock \(rule: outputs match dvc\.lock\)", refused.stderr), refused.stderr[-2000:]
    assert {rel: (clone / rel).read_bytes() for rel in before} == before
