"""No exclusion an agent can choose (docs/formats.md, the missing-data rule), tried as an adversary would.

Each case is a simulated agent (the real CLI, really sandboxed) whose tool calls leave its workspace, its stream or
its session in a state the harness used to exclude as its own fault: a path over PATH_MAX, a mode-000 directory, a
raw U+2028 in a tool result, a stream over the cap, a stream the parser refuses, a CLI that stops at max turns, a
disk flood from inside the oracle. Every such row must be measured (a kind in the schema's measured list), keep its cost
(not None) and match its transcripts. In the other direction, real API faults (the simulator's fault modes) stay
excluded `session-error`.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from skillevo.agent import session as session_module
from skillevo.bench import CellResult, build_cells, churn, plan, run_cell
from skillevo.bench import cell as cell_module
from skillevo.core import config, models
from skillevo.core.results import EXCLUDED_ERROR_KINDS, MEASURED_ERROR_KINDS, check_row_transcripts
from skillevo.files import safefs
from skillevo.files.schemas import validate
from skillevo.simulator import Simulator, load_all
from tests.bench_fixtures import ROOT, make_mini, params_doc
from tests.conftest import session_processes

TEST = "from pkg.greet import greet\n\n\ndef test_greet():\n    assert greet() == 'hello'\n"
HONEST = [{"edit": {"path": "pkg/greet.py", "old": '"hi"', "new": '"hello"'}},
          {"write": {"path": "tests/test_greet.py", "content": TEST}}]
LONG = "d" * 250
BREAKS = "printf 'a\\342\\200\\250b\\342\\200\\251c\\302\\205d\\013e\\n'"  # U+2028, U+2029, U+0085, \x0b
# The code under test writes 80 MB beside the oracle's report (a writable mount no disk watch sees), then spoils
# the report: without the cell's own quota check, the full scratch would make this an excluded infra-error.
ORACLE_FLOOD = ("import os\n\n_r = os.environ.get('SKILLEVO_ORACLE_REPORT')\nif _r:\n"
                "    for _i in range(2):\n"
                "        with open(os.path.join(os.path.dirname(_r), f'blob{_i}'), 'wb') as _f:\n"
                "            _f.write(b'x' * (40 << 20))\n"
                "    import atexit\n    atexit.register(lambda: open(_r, 'w').write('not xml'))\n")
REPORT_LOCK = ("import atexit\nimport os\n\n_r = os.environ.get('SKILLEVO_ORACLE_REPORT')\nif _r:\n"
               "    _d = os.path.dirname(_r)\n    os.makedirs(_d + '/x/y', exist_ok=True)\n"
               "    os.chmod(_d + '/x/y', 0)\n    os.chmod(_d + '/x', 0)\n"
               "    atexit.register(os.chmod, _d, 0)\n")
CASES: dict[str, list[dict]] = {
    "honest": HONEST,
    # a path of 20 x 251 bytes: over PATH_MAX, reachable only one directory at a time
    "longpath": [*HONEST, {"bash": f"for i in $(seq 20); do mkdir {LONG} && cd {LONG} || exit 1; done; "
                                   "echo deep > f; pwd | wc -c"}],
    # 80 MB written below a path over PATH_MAX, where a path walk of the workspace never looks
    "hiddenflood": [*HONEST, {"bash": f"for i in $(seq 20); do mkdir {LONG} && cd {LONG} || exit 1; done; "
                                      "head -c 40M /dev/zero > a; head -c 40M /dev/zero > b; sleep 10"}],
    # 80 MB into /dev/shm from a Bash tool call: there the CLI's inner sandbox has mounted a /dev of its own, a
    # tmpfs nobody sized (the host's memory), where our /tmp and HOME are read-only
    "tmpflood": [*HONEST, {"bash": "head -c 40M /dev/zero > /dev/shm/a; head -c 40M /dev/zero > /dev/shm/b; "
                                   "sleep 10"}],
    "locked": [*HONEST, {"bash": "mkdir -p locked/inner && echo x > locked/inner/f && chmod 000 locked/inner/f "
                                 "locked/inner locked && ls -ld locked"}],
    # the code under test locks the oracle's report directory (writable, and the harness user's) as the oracle exits;
    # (the workspace root cannot be locked so: the CLI restores its cwd's mode after every command, and the checks
    # mount the workspace read-only), and a tree left without a write bit anywhere (removal restores modes)
    "reportlocked": [*HONEST, {"write": {"path": "pkg/__init__.py", "content": REPORT_LOCK}}],
    # a locked directory deeper than Python's recursion limit, under another one locked half-way down
    "deeplocked": [*HONEST, {"bash": "python3 -c \"import os\nfor i in range(1200):\n    os.mkdir('d'); os.chdir('d')\n"
                                     "open('f', 'w').write('x')\" && chmod 000 $(printf 'd/%.0s' $(seq 1200)) "
                                     "$(printf 'd/%.0s' $(seq 600))"}],
    "readonly": [*HONEST, {"bash": "mkdir -p ro/a/b && echo x > ro/a/b/f && chmod -R a-w ro && ls -ld ro"}],
    "breaks": [*HONEST, {"bash": BREAKS}, {"bash": f"{BREAKS} > notes.txt"}, {"read": "notes.txt"}],
    "flood": [*HONEST, {"write": {"path": "big.txt", "content": "flood " * 60_000}}],
    "oracleflood": [*HONEST, {"write": {"path": "pkg/__init__.py", "content": ORACLE_FLOOD}}],
}
LIMITS = {"processes": 64, "memory_mb": 1536, "cpu_s": 600, "disk_mb": 64, "tmp_mb": 64, "file_mb": 64}


def _tasks(root: Path, names: list[str], timeout_s: int | None) -> Path:
    """The mini tasks directory with one task per case, each matched by its own phrase."""
    tasks_file = make_mini(root)
    doc = yaml.safe_load(tasks_file.read_text())
    greet = doc["tasks"][0]
    extra = {"timeout_s": timeout_s} if timeout_s else {}
    doc["tasks"] = [{**greet, "id": name, "prompt": f"case {name}: make greet say hello; add tests/test_greet.py",
                     **extra} for name in names]
    tasks_file.write_text(yaml.safe_dump(doc))
    book = yaml.safe_load((root / "tasks/playbooks/mini.yaml").read_text())
    book["tasks"] = [{"id": name, "match": f"case {name}:", "sessions": {"work": CASES[name]}} for name in names]
    (root / "tasks/playbooks/mini.yaml").write_text(yaml.safe_dump(book))
    return tasks_file


def _run(root: Path, names: list[str], mode: str = "normal", timeout_s: int | None = None) -> dict[str, CellResult]:
    """One cell per case (the `auto` arm, one run), through the real CLI against the simulator in `mode`."""
    tasks_file = _tasks(root, names, timeout_s)
    doc = params_doc(runs=1, bench={"limits": LIMITS})
    doc["arms"] = {"auto": doc["arms"]["auto"]}
    params = config.parse(doc)
    side = plan("incumbent", tasks_file, ROOT / "skills", None, params)
    scratch = root / "scratch"
    scratch.mkdir()
    with Simulator(load_all([tasks_file.parent / "playbooks/mini.yaml"]),
                   max_retries=params.bench.max_retries) as sim:
        model, credential = models.resolve(params.model, sim.url(mode))
        cells = build_cells(side, params.bench, model, scratch)
        with ThreadPoolExecutor(4) as pool:
            results = dict(zip([c.task.id for c in cells], pool.map(lambda c: run_cell(c, credential=credential),
                                                                    cells), strict=True))
    left = [p.name for p in scratch.iterdir() if p.name not in ("templates", "trees")]  # build_cells' own
    assert not left, left  # every cell's directory was removed, whatever its agent left in it
    assert not session_processes()
    return results


def _measured(result: CellResult, kind: str) -> dict:
    """The row is a measured failure of `kind`, with its cost, and its numbers are what its transcripts say."""
    row = result.row
    validate(row, "result-row", "row")
    assert row["error_kind"] == kind, (row["error_kind"], row["error_detail"])
    assert kind in MEASURED_ERROR_KINDS and row["resolved"] is False
    assert row["cost_usd"] is not None and row["cost_usd"] > 0 and row["input_tokens"] > 0, row
    check_row_transcripts(row, Path("."), f"row {row['task']}", read=lambda meta: result.artifacts[meta["path"]])
    return row


def _transcript(result: CellResult) -> list[dict]:
    [data] = [v for k, v in result.artifacts.items() if k.startswith("transcripts/")]
    return [json.loads(line) for line in data.split(b"\n") if line]


def _as_a_non_root_harness(monkeypatch) -> None:
    """We run as root, which reads mode-000 files regardless. A harness run by a user owns what its agent (mapped
    to that user) wrote and is refused by the kernel on a directory without its owner's r-x or a file without r:
    churn's snapshot gets that real errno here, before it reads the tree."""
    snapshot = churn.snapshot

    def refusing(root: Path, exclude: tuple[str, ...], **kw):
        for rel, _, _, st in safefs.scan(root):  # by directory fd, as the snapshot walks
            need = 0o500 if stat.S_ISDIR(st.st_mode) else 0o400
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & need != need:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), rel)
        return snapshot(root, exclude, **kw)

    monkeypatch.setattr(churn, "snapshot", refusing)


@pytest.mark.cli
@pytest.mark.bwrap
def test_what_an_agent_leaves_or_breaks_is_measured_at_its_cost(tmp_path, monkeypatch):
    _as_a_non_root_harness(monkeypatch)
    results = _run(tmp_path, ["honest", "longpath", "locked", "breaks", "hiddenflood", "tmpflood"])
    honest = results["honest"].row
    assert honest["resolved"] is True and honest["error_kind"] is None, honest["error_detail"]

    longpath = results["longpath"].row  # measured by directory fd: a path past PATH_MAX is just a file
    assert longpath["resolved"] is True and longpath["diff_files"] == 3, longpath["error_detail"]
    locked = _measured(results["locked"], "workspace-error")
    assert "Permission denied" in locked["error_detail"]
    assert locked["cost_usd"] >= honest["cost_usd"] and len(locked["transcripts"]) == 1  # the session was paid for

    hidden = _measured(results["hiddenflood"], "cell-limit")  # the watch saw it and stopped the session
    assert hidden["error_detail"].startswith("session 1 (auto): session stopped: disk: the workspace and the "
                                             "sandbox's other writable mounts grew by"), hidden["error_detail"]

    tmpfs = _measured(results["tmpflood"], "cell-limit")  # what the tmpfs mounts hold counts: it is host memory
    assert re.search(r"session stopped: disk: .* grew by \d+ MB, over bench.limits.disk_mb 64",
                     tmpfs["error_detail"]), tmpfs["error_detail"]

    breaks = results["breaks"]  # the stream is read whole: an ordinary, resolved measurement
    assert breaks.row["resolved"] is True and breaks.row["error_kind"] is None, breaks.row["error_detail"]
    check_row_transcripts(breaks.row, Path("."), "breaks", read=lambda meta: breaks.artifacts[meta["path"]])
    text = json.dumps(_transcript(breaks), ensure_ascii=False)
    assert all(c in text for c in "\u2028\u2029\x85")  # the raw breaks did reach the stream and the transcript



@pytest.mark.cli
@pytest.mark.bwrap
def test_a_stream_the_strict_parser_refuses_is_measured_at_the_tokens_the_relay_counted(tmp_path, monkeypatch):
    """The U+2028 stream above no longer breaks the parser, and an agent cannot kill its CLI or write to its stdout
    (the tools run in the CLI's own sandbox, another PID namespace): so the refusal is forced here, as a future CLI
    or an unforeseen byte would cause it. The session really ran; only its stream is refused."""
    def refuse(stdout: bytes):
        raise session_module.stream.StreamError("line 3 is not JSON: refused by this test")

    monkeypatch.setattr(session_module.stream, "parse", refuse)
    result = _run(tmp_path, ["honest"])["honest"]
    row = _measured(result, "session-failed")
    assert "unreadable session stream: line 3 is not JSON" in row["error_detail"]
    assert "no failed answer" in row["error_detail"]
    events = _transcript(result)
    assert "result" not in [e["type"] for e in events] and "assistant" in [e["type"] for e in events]
    assert events[-1]["type"] == "skillevo_stopped" and events[-1]["total_cost_usd"] == row["cost_usd"]


@pytest.mark.cli
@pytest.mark.bwrap
def test_a_stream_over_the_cap_is_measured_at_the_tokens_the_relay_counted(tmp_path, monkeypatch):
    """The cap is lowered here (8 MiB of stream takes minutes to write through the CLI): the rule is the same."""
    monkeypatch.setattr(session_module, "MAX_TRANSCRIPT_BYTES", 256 << 10)
    result = _run(tmp_path, ["flood"])["flood"]
    row = _measured(result, "session-failed")
    assert f"exceeded {256 << 10} bytes" in row["error_detail"]
    events = _transcript(result)
    assert [e["type"] for e in events].count("skillevo_stopped") == 1 and "result" not in [e["type"] for e in events]
    assert events[-1]["usage"]["output_tokens"] > 60_000 // 4  # the 360 kB the agent wrote, counted by the relay


@pytest.mark.cli
@pytest.mark.bwrap
def test_a_cli_error_result_without_an_api_failure_is_measured(tmp_path, monkeypatch):
    """Max turns: the CLI ends with an error result while every answer of the endpoint was good."""
    monkeypatch.setattr(cell_module, "SessionSpec", functools.partial(cell_module.SessionSpec, max_turns=2))
    result = _run(tmp_path, ["honest"])["honest"]
    row = _measured(result, "session-failed")
    assert "error_max_turns" in row["error_detail"] and "no failed answer" in row["error_detail"]
    [account] = [e for e in _transcript(result) if e["type"] == "result"]  # the CLI's own account, kept
    assert round(account["total_cost_usd"], 6) == row["cost_usd"]


@pytest.mark.cli
@pytest.mark.bwrap
def test_a_full_scratch_is_the_flooders_doing_and_only_excuses_its_victims(tmp_path, monkeypatch):
    """The scratch filesystem is made to read as full (the host's disk is not filled): the cell that grew past its
    quota is measured `cell-limit`; a cell that failed within its quota stays an excluded victim."""
    monkeypatch.setattr(cell_module, "_scratch_full", lambda scratch: True)
    monkeypatch.setitem(CASES, "victim", [{"write": {"path": "tests/test_greet.py", "content": TEST}}])
    results = _run(tmp_path, ["oracleflood", "victim"])
    row = _measured(results["oracleflood"], "cell-limit")
    assert re.search(r"grew by \d+ MB, over bench.limits.disk_mb 64", row["error_detail"]), row["error_detail"]
    assert "was: oracle-error" in row["error_detail"]
    victim = results["victim"].row
    assert victim["error_kind"] == "infra-error" and "was: verify-failed" in victim["error_detail"], victim
    assert "grew by only 0 MB" in victim["error_detail"]


@pytest.mark.cli
@pytest.mark.bwrap
def test_skills_changed_under_a_session_are_measured_and_a_failure_before_any_session_is_not(tmp_path, monkeypatch):
    """The skills are mounted read-only, so no agent here can change them: the fingerprint taken after the session is
    made to differ, as if one had. Only the agent could have, so the run is measured with its cost. A workspace the
    harness fails to build, before any agent ran, stays the harness's fault."""
    real, seen = cell_module.skills_fingerprint, []

    def fingerprint(ws: Path) -> str | None:
        seen.append(ws)
        return real(ws) if len(seen) == 1 else "0" * 64

    monkeypatch.setattr(cell_module, "skills_fingerprint", fingerprint)
    row = _measured(_run(tmp_path / "a", ["honest"])["honest"], "skills-changed")
    assert "changed during session 1" in row["error_detail"]

    def broken(template: Path, ws: Path) -> None:
        raise OSError(errno.EIO, "simulated I/O error", str(ws))

    monkeypatch.setattr(cell_module.workspace, "materialize", broken)
    row = _run(tmp_path / "b", ["honest"])["honest"].row
    assert row["error_kind"] == "infra-error" and "EIO" in row["error_detail"], row["error_detail"]
    assert row["phases"]["sessions_s"] == [] and row["cost_usd"] is None


@pytest.mark.cli
@pytest.mark.bwrap
@pytest.mark.parametrize("mode, detail", [
    ("overloaded", "HTTP 529"),  # beyond the CLI's retries (params bench.max_retries)
    ("server-error", "HTTP 500"),
    ("hang", "had not answered"),
])
def test_real_api_faults_stay_excluded(tmp_path, mode, detail):
    result = _run(tmp_path, ["honest"], mode=mode, timeout_s=20 if mode == "hang" else None)["honest"]
    row = result.row
    validate(row, "result-row", "row")
    assert row["error_kind"] == "session-error" and row["error_kind"] in EXCLUDED_ERROR_KINDS, row["error_detail"]
    assert detail in row["error_detail"]
    check_row_transcripts(row, Path("."), "row", read=lambda meta: result.artifacts[meta["path"]])


KIND_LITERAL = re.compile(r'"([a-z]+(?:-[a-z]+)+)"')
NOT_KINDS = {"bench-run", "freeze-manifest", "result-row", "skillevo-cells", "spawn-failure", "x-api-key"}


def test_every_error_kind_the_bench_writes_is_declared_in_the_row_schema():
    """One definition, in the schema: a kind written by the session or the cell that the schema does not declare
    (as cleanup-failure was, once it was dropped) would fail a side only when it happened."""
    written = set()
    for rel in ("skillevo/agent/session.py", "skillevo/bench/cell.py", "skillevo/bench/side.py",
                "skillevo/bench/sideplan.py", "skillevo/bench/executor.py", "skillevo/bench/ray_executor.py"):
        written |= set(KIND_LITERAL.findall((ROOT / rel).read_text())) - NOT_KINDS
    assert written <= MEASURED_ERROR_KINDS | EXCLUDED_ERROR_KINDS, written - MEASURED_ERROR_KINDS - EXCLUDED_ERROR_KINDS
    assert {"session-failed", "skills-changed", "workspace-error"} <= written & MEASURED_ERROR_KINDS
    assert not MEASURED_ERROR_KINDS & EXCLUDED_ERROR_KINDS
