"""Evidence -> propose -> freeze on the demo, offline, and the proposer's box."""

from __future__ import annotations

import json
import re
import shutil
import uuid
from pathlib import Path

import pytest

from skillevo import propose
from skillevo.core import config, layout, memory, overlay
from skillevo.core.models import Model
from skillevo.evidence import make_bundle, write_bundle
from skillevo.files import safefs
from skillevo.freeze import freeze
from skillevo.simulator import EscapeTargets, Simulator, demo, load_all
from skillevo.simulator.proposer import SimulatedProposer
from tests.bench_fixtures import ROOT, params
from tests.conftest import session_processes

pytestmark = [pytest.mark.cli, pytest.mark.bwrap]
WASTEFUL = "Read every module of the package end to end before editing"
BOOKS = sorted((ROOT / "tasks/playbooks").glob("*.yaml"))
MARKER = f"proposer-escape-marker-{uuid.uuid4().hex}"  # unique: only this run's escapee carries it


@pytest.fixture(scope="module")
def evidence(tmp_path_factory, demo_incumbent) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("gen")
    bench_dir, rows = demo_incumbent
    bundle = make_bundle(params=params(runs=1), previous=None, incumbent=bench_dir, seed=None, learnings=None,
                         tasks=ROOT / "tasks/tasks.yaml")
    write_bundle(bundle, root / "evidence")
    return root, rows


def _propose(root: Path, endpoint_mode: str, out: Path, skills: Path = ROOT / "skills", **sim_kw) -> dict:
    book = load_all(BOOKS)
    with Simulator(book, responders={"proposer": SimulatedProposer(book, {"plan", "work"})}, **sim_kw) as sim:
        return propose.run(prompt=propose.render_prompt(ROOT / "skillevo/prompts/propose.md", ["plan", "work"], 40),
                           skills_dir=skills, evidence_dir=root / "evidence", evolvable=["plan", "work"],
                           model=Model("simulator", demo.MODEL, sim.url(endpoint_mode)), credential=None,
                           limits=overlay.Limits(max_changed_lines=40), out=out, timeout_s=120)


def test_evidence_propose_freeze_removes_the_wasteful_instruction(evidence, tmp_path):
    root, rows = evidence
    record = _propose(root, "proposer", tmp_path / "proposal")
    assert record["ok"] and record["overlay_files"] == ["work/SKILL.md"] and record["changed_lines"] == 1
    incumbent = (ROOT / "skills/work/SKILL.md").read_text().splitlines(True)
    proposed = (tmp_path / "proposal/overlay/work/SKILL.md").read_text()
    assert proposed == "".join(line for line in incumbent if WASTEFUL not in line)
    text = (tmp_path / "proposal/proposal.md").read_text()
    cited = re.findall(r"([a-z-]+)/(auto|baseline|workflow)/run(\d+)", text)
    real = {(r["task"], r["arm"], str(r["run"])) for r in rows}
    assert cited and set(cited) <= real
    for section in ("## Pattern", "## Change", "## Expected metric movement", "## Risks"):
        assert section in text
    manifest = freeze(tmp_path / "proposal/overlay", params=config.load(ROOT / "params.yaml"),
                      tasks_file=ROOT / "tasks/tasks.yaml", repo=ROOT, out=tmp_path / "freeze",
                      session=tmp_path / "proposal/session.json")
    assert manifest["candidate_origin"] == "proposer" and manifest["proposer_model"] == demo.MODEL
    assert manifest["required_candidate_arms"] == ["candidate_auto", "candidate_workflow"]


def test_proposer_cannot_read_tasks_oracles_or_anything_outside_its_mounts(evidence, tmp_path):
    root, _ = evidence
    canary = "skillevo-oracle-canary"
    targets = EscapeTargets(outside_dir=str(ROOT / "tasks"), planted_file=str(ROOT / "tasks/tasks.yaml"),
                            home_dir=str(Path.home()), oracle_dir=str(ROOT / "tasks/oracles"), loopback_port=9,
                            marker=MARKER)
    with pytest.raises(propose.ProposalRefused, match="wrote no overlay"):
        _propose(root, "escape", tmp_path / "proposal", escape=targets)
    transcript = "".join(p.read_text() for p in (tmp_path / "proposal/transcripts").iterdir())
    assert "oracle-search-done" in transcript and "read-rc=1" in transcript
    assert canary not in transcript
    assert "dialogue-heavy text" not in transcript  # a task prompt from tasks.yaml
    assert not (ROOT / "tasks/escape-bash.txt").exists() and not (ROOT / "tasks/escape-write.txt").exists()
    assert not session_processes(MARKER)
    assert json.loads((tmp_path / "proposal/session.json").read_text())["ok"] is True


def test_prior_rejected_proposal_is_not_proposed_again(evidence, tmp_path):
    root, _ = evidence
    first = tmp_path / "first"
    _propose(root, "proposer", first)
    (root / "evidence").chmod(0o755)
    (root / "evidence/prior-proposal.md").write_text((first / "proposal.md").read_text())
    second = tmp_path / "second"
    _propose(root, "proposer", second)
    removed = [next(line for line in (d / "proposal.md").read_text().splitlines()
                    if line.startswith("Instruction removed: "))
               for d in (first, second)]
    assert WASTEFUL in removed[0] and WASTEFUL not in removed[1]
    for f in (second / "overlay").rglob("SKILL.md"):
        assert f.read_text() != (first / "overlay/work/SKILL.md").read_text()


def test_the_simulated_proposer_works_on_a_family_of_realistic_size(evidence, tmp_path):
    """Forty more skills of 6 KB each: far more text than one Bash output may carry before the CLI shortens it
    to a preview. The proposer reads only bounded outputs, so it still finds and removes the same line."""
    root = tmp_path / "gen"
    shutil.copytree(evidence[0] / "evidence", root / "evidence")
    (root / "evidence/prior-proposal.md").unlink(missing_ok=True)  # another test hands on a rejected proposal
    family = tmp_path / "skills"
    shutil.copytree(ROOT / "skills", family)
    for i in range(40):
        name = f"filler-{i:02d}"
        (family / name).mkdir()
        bullets = "".join(f"- Step {j} of the {name} routine: check the inputs, then record the result.\n"
                          for j in range(80))
        (family / name / "SKILL.md").write_text(f"---\nname: {name}\ndescription: Routine number {i}.\n---\n"
                                               f"# {name}\n\n{bullets}")
    record = _propose(root, "proposer", tmp_path / "proposal", skills=family)
    assert record["ok"] and record["overlay_files"] == ["work/SKILL.md"]
    assert WASTEFUL not in (tmp_path / "proposal/overlay/work/SKILL.md").read_text()


def test_the_proposer_chooses_by_attributed_cost_not_by_what_the_playbook_calls_necessary():
    from skillevo.simulator.proposer import _choose, _key

    book = load_all(BOOKS)
    lines = [("work", 8, "- Read every module of the package end to end before editing, so that no caller is missed.",
              ()),
             ("work", 11, "- Handle empty and boundary inputs explicitly: whatever the task says about empty input.",
              ())]
    analysis = {"rows": 3, "costs": {"survey": 1_000, "edge-cases": 9_000}, "share": {"edge-cases": 31.4},
                "cited": {"survey": ["t/a/0"], "edge-cases": ["t/a/1"]}, "rejected": []}
    assert book.instructions["edge-cases"].necessary  # the playbook knows; the proposer does not use it
    skill, line, _, what, _, tokens, predicted = _choose(book, analysis, lines)
    assert (skill, what, tokens) == ("work", "the instruction `edge-cases`", 9_000) and line == lines[1][2]
    assert predicted == 31.4  # the priced share the cited runs spent on those turns (issue 33, item 2)
    analysis["rejected"] = [_key(lines[1][2])]  # a rejected removal is not proposed again
    assert _choose(book, analysis, lines)[1] == lines[0][2]
    analysis["rejected"].append(_key(lines[0][2]))  # nothing left that a run shows: it declines, never a guess
    with pytest.raises(LookupError, match=r"in 3 evidence run\(s\), no line .* nothing in the evidence supports"):
        _choose(book, analysis, lines)


def test_the_simulated_proposer_never_removes_a_line_no_cited_run_shows():
    """Issue 32, item 4: a line no cited run shows supports no change: it declines (the generation is a cheap
    no_proposal) where it once removed 'a line that steers no measured behaviour'. A cited line whose turns carry no
    usage (a backend's transcripts may not) is still one the runs show, and is proposed, saying so."""
    from skillevo.simulator.proposer import _choose

    book = load_all(BOOKS)
    lines = [("work", 8, "- Read every module of the package end to end before editing, so that no caller is missed.",
              ()), ("work", 9, "- Make the smallest change.", ())]
    for costs, cited in (({"survey": 4_000}, {}), ({}, {})):
        with pytest.raises(LookupError, match="nothing in the evidence supports a change"):
            _choose(book, {"rows": 3, "costs": costs, "cited": cited, "rejected": []}, lines)
    found = _choose(book, {"rows": 3, "costs": {"survey": 0}, "cited": {"survey": ["t/a/0"]}, "rejected": []}, lines)
    assert found[1] == lines[0][2] and found[4:] == (["t/a/0"], 0, None)  # no usage: nothing to size a forecast
    from skillevo.core import prediction
    from skillevo.simulator.proposer import _proposal

    text = _proposal("work", lines[0][2], (), "x", ["t/a/0"], 0, 3)
    assert "carry no per-turn usage, so their tokens are not counted here. Runs: t/a/0." in text
    assert prediction.parse(text, "proposal.md") is None and "No prediction: " in text
    text = _proposal("work", lines[0][2], (), "x", ["t/a/0"], 900, 3, predicted=12.5)
    assert prediction.parse(text, "proposal.md") == 12.5  # what it writes is what freeze reads


def test_the_simulated_proposer_removes_a_list_item_with_its_continuation_lines():
    """A two-line item once lost only its first line, and the dangling continuation reached the promoted SKILL.md:
    the grep shows the lines after each match, and the block (the item and its indented lines) goes whole; a block
    that may run past what grep showed is never chosen."""
    from types import SimpleNamespace

    from skillevo.simulator.proposer import CONTEXT, GREP, _choose, _lines

    book = load_all(BOOKS)
    path = "/work/skills/work/SKILL.md"
    survey = book.instructions["survey"].phrase
    out = "\n".join([GREP, f"{path}:8:- Before editing, {survey},",
                      f"{path}-9-  so that no caller is missed,", f"{path}-10-  and no test either.",
                      f"{path}-11-- Make the smallest change.", "--",
                      f"{path}:20:- Finally, {survey} again,",
                      *[f"{path}-{21 + i}-  more {i}" for i in range(CONTEXT)]])
    conv = SimpleNamespace(results=[SimpleNamespace(text=out)])
    lines = _lines(conv)
    assert [(n, rest) for _, n, _, rest in lines] == [(8, ("  so that no caller is missed,", "  and no test either."))]
    analysis = {"rows": 3, "costs": {"survey": 5_000}, "cited": {"survey": ["t/a/0"]}, "rejected": []}
    assert _choose(book, analysis, lines)[2] == ("  so that no caller is missed,", "  and no test either.")


def test_a_failure_of_the_simulator_is_reported_as_one_never_as_a_transient_api_error():
    import http.client

    def broken(conv, body):
        raise ValueError("the playbook has no step here")

    book = load_all(BOOKS)
    with Simulator(book, responders={"proposer": broken}) as sim:
        conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
        conn.request("POST", "/mode/proposer/v1/messages", body=json.dumps(
            {"model": demo.MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
            headers={"content-type": "application/json"})
        response = conn.getresponse()
        payload = json.loads(response.read())
    assert response.status == 400  # a client error: the CLI does not retry it as if the API were down
    assert "skillevo simulator failure (not an API error): ValueError: the playbook has no step here" in \
        payload["error"]["message"]
    assert sim.failures == ["ValueError: the playbook has no step here"]


def test_the_prompt_says_what_the_overlay_may_do():
    template = ROOT / "skillevo/prompts/propose.md"
    plain = propose.render_prompt(template, ["work"], 40)
    assert "What an overlay may do: replace Markdown files of an evolvable skill. Adding a new file" in plain
    assert "Do not add, change or remove the frontmatter keys agent, allowed-tools" in plain
    assert "{" not in plain.split("Do this:")[1]  # every placeholder filled
    wide = propose.render_prompt(template, ["work"], 40, ("scripts", "supporting-files", "privileged-frontmatter"))
    assert "edit a script (a file with an execute bit)" in wide and "that are not scripts" in wide
    assert "and add new files inside it" in wide and "Adding a new file is not possible" not in wide
    narrow = propose.render_prompt(template, ["work"], 40, ("supporting-files",))
    assert "and add new files inside it. A new file may not carry an execute bit." in narrow
    assert "You may change the frontmatter keys" in wide


def test_every_rejected_candidate_reaches_the_simulated_proposer_and_none_comes_back(demo_incumbent, tmp_path):
    """Three generations, each handed the memory of all the earlier ones (rejected.json only, no prior proposal):
    every earlier candidate is in the bundle, newest first, and the proposer removes a line none of them did; once
    every line a run shows was tried, the third declines (a no_proposal generation), never guessing at a line."""
    bench_dir, _ = demo_incumbent
    executables: set[str] = set()
    family = layout.read_family(ROOT / "skills", frozenset(), executables)
    digest = layout.tree_digest(family, executables)
    assert json.loads((bench_dir / "bench.json").read_text())["skills_digest"] == digest
    removed: list[str] = []
    entries: list[dict] = []
    for gen in (1, 2, 3):
        root = tmp_path / f"gen{gen}"
        (root / "previous").mkdir(parents=True)
        (root / "previous/rejected.json").write_bytes(memory.dump(entries))
        write_bundle(make_bundle(params=params(runs=1), previous=root / "previous", incumbent=bench_dir, seed=None,
                                 learnings=None, tasks=ROOT / "tasks/tasks.yaml"), root / "evidence")
        shown = json.loads((root / "evidence/rejected.json").read_text())
        assert [e["generation"] for e in shown] == list(range(gen - 1, 0, -1))
        record = _propose(root, "proposer", root / "proposal")
        if gen == 3:
            assert record["declined"] and not (root / "proposal/overlay").exists()
            assert "2 line(s) tried before): nothing in the evidence" in propose.declined(root / "proposal")
            break
        removal = next(line for line in (root / "proposal/proposal.md").read_text().splitlines()
                       if line.startswith("Instruction removed: "))
        assert removal not in removed, (gen, removal)
        removed.append(removal)
        files = safefs.read_tree(root / "proposal/overlay", max_file_bytes=1 << 20, max_total_bytes=1 << 20)
        verdict = "insufficient_evidence" if gen == 2 else "keep_incumbent"  # the proposer avoids both kinds
        entries.append(memory.entry(gen, digest, family, executables, files, set(),
                                    [{"candidate_arm": "candidate_workflow", "decision": verdict, "reasons": ["r"]}]))
    assert WASTEFUL in removed[0]


def test_the_simulated_proposal_names_the_family_where_the_team_keeps_it():
    """A team's skills live in .claude/skills; the proposal told its reviewers to edit skills/<name>/SKILL.md
    (issue 32, rough edges)."""
    from skillevo.simulator.proposer import _proposal

    text = _proposal("work", "- Read every module.", (), "this line", ["t-auto-run1"], 1200, 1,
                     skills_path=".claude/skills")
    assert "Remove this from `.claude/skills/work/SKILL.md`" in text and "`skills/work" not in text
