"""MCP servers per arm, end to end: a skill that tells the agent to call an MCP tool is measured through the real
CLI in bwrap, with the team's stdio server (a script in a folder of the team's repository, frozen when the side is
planned) started by the CLI in a sandbox of its own inside the cell's. The arm that has the server resolves; the same
skill in an arm without it has nothing to go on; both sessions' calls are counted in rows and transcripts, and the
report names the runs that never called the tool. A hostile agent cannot rewrite the server for its next session,
and the server cannot reach the model relay (issue 30, item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from skillevo.agent import cli
from skillevo.bench import plan, run_side
from skillevo.core import config
from skillevo.core.arms import McpServer
from skillevo.files.errors import BadInput
from tests.bench_fixtures import ROOT, params_doc

# A minimal stdio MCP server, as a team would keep one in its repository: newline-delimited JSON-RPC 2.0. Its one
# tool answers from the repository (so it runs where the workspace is) and says where it ran: whether it has a
# network, whether any road to the model relay is open to it (PROBE, which a Bash call runs too), and which file.
PROBE = r'''
import glob, socket
def relay_roads():
    """Every way a process of the cell's sandbox could reach the model relay."""
    roads = []
    try:
        socket.create_connection(("127.0.0.1", 8787), timeout=1).close(); roads.append("loopback")
    except OSError:
        pass
    for path in ["/run/skillevo/relay.sock", *glob.glob("/proc/*/root/run/skillevo/relay.sock")]:
        try:
            s = socket.socket(socket.AF_UNIX); s.settimeout(1); s.connect(path); s.close(); roads.append(path)
        except OSError:
            pass
    return "relay via " + ",".join(roads) if roads else "no relay"
'''
SERVER = PROBE + r'''
import json, os, sys
ORIGIN = 'frozen server'
def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    req = json.loads(line)
    rid, method = req.get("id"), req.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": req["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "codeindex", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [{"name": "lookup", "description": "where a symbol is",
              "inputSchema": {"type": "object", "properties": {"symbol": {"type": "string"}}}}]}})
    elif method == "tools/call":
        symbol = req["params"]["arguments"].get("symbol", "")
        found = [p for p in ("pkg/greet.py",) if symbol in open(p).read()]
        try:
            socket.create_connection(("1.1.1.1", 53), timeout=1).close(); net = "network"
        except OSError:
            net = "no network"
        relay = relay_roads()
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text":
              f"defined in {found[0] if found else 'nowhere'} ({net}, {relay}, cwd {os.getcwd()}, {ORIGIN})"}]}})
    elif rid is not None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}})
'''

TASKS = {"schema_version": 1, "tasks": [
    {"id": "greet", "class": "trivial", "target": "targets/greet",
     "prompt": "make the friendlier greeting say hello; add tests in tests/test_greet.py",
     "verify": "python3 -m pytest -q -p no:cacheprovider tests/test_greet.py",
     "oracle": {"command": 'python3 -m pytest -q -p no:cacheprovider --rootdir="$SKILLEVO_ORACLE_DIR" '
                           '"$SKILLEVO_ORACLE_DIR/test_greet_oracle.py"',
                "files": [{"source": "test_greet_oracle.py", "target": "test_greet_oracle.py"}]}}]}

# the work skill finds the code through the MCP tool before it edits; without an answer it has nothing to go on
PLAYBOOK = {"schema_version": 1, "unskilled": "work", "instructions": [], "tasks": [
    {"id": "greet", "match": "friendlier greeting", "sessions": {"work": [
        {"mcp": {"tool": "mcp__codeindex__lookup", "input": {"symbol": "def greet"}, "expect": "pkg/greet.py"}},
        {"edit": {"path": "pkg/greet.py", "old": '"hi"', "new": '"hello"'}},
        {"write": {"path": "tests/test_greet.py",
                   "content": "from pkg.greet import greet\n\n\ndef test_greet():\n    assert greet() == 'hello'\n"}},
        {"bash": "python3 -m pytest -q -p no:cacheprovider tests/test_greet.py"}]}}]}

WORK = [{"skill": "work", "prompt": "Use the work skill. {prompt}"}]


def server_arms(root: Path, sessions: list | None = None) -> dict:
    """An arm with the codeindex server (its files in `root`/mcp/codeindex) and one with the same skill and none."""
    server = {"command": "python3", "args": ["{dir}/codeindex_mcp.py"], "dir": str(root / "mcp/codeindex")}
    return {"work": {"sessions": sessions or WORK, "mcp": {"codeindex": server}}, "work_nomcp": {"sessions": WORK}}


def _tasks(root: Path) -> Path:
    tasks = root / "tasks"
    (tasks / "targets/greet/pkg").mkdir(parents=True)
    (tasks / "targets/greet/pkg/__init__.py").write_text("")
    (tasks / "targets/greet/pkg/greet.py").write_text('def greet():\n    return "hi"\n')
    (root / "mcp/codeindex").mkdir(parents=True)  # the team's server, outside any workspace
    (root / "mcp/codeindex/codeindex_mcp.py").write_text(SERVER)
    (tasks / "oracles").mkdir()
    (tasks / "oracles/test_greet_oracle.py").write_text(
        "from pkg.greet import greet\n\n\ndef test_greet_says_hello():\n    assert greet() == 'hello'\n")
    (tasks / "playbooks").mkdir()
    (tasks / "playbooks/mcp.yaml").write_text(yaml.safe_dump(PLAYBOOK))
    (tasks / "tasks.yaml").write_text(yaml.safe_dump(TASKS))
    return tasks / "tasks.yaml"


def _params(arms: dict, **sections: dict) -> config.Params:
    doc = params_doc(**sections)
    doc["arms"] = arms
    return config.parse(doc)


def test_an_arms_servers_reach_the_cli_as_its_only_mcp_config_each_in_a_sandbox_of_its_own():
    server = McpServer("codeindex", "python3", ("{dir}/codeindex_mcp.py",), "/srv/codeindex")
    args = cli.argv(model="m", tools=("Read",), mcp=(server,), tmp_mb=32)
    [(name, entry)] = json.loads(args[args.index("--mcp-config") + 1])["mcpServers"].items()
    assert name == "codeindex" and entry["type"] == "stdio" and entry["env"] == {}
    assert entry["command"] == "bwrap" and entry["args"][-3:] == ["--", "python3",
                                                                  "/opt/skillevo/mcp/codeindex/codeindex_mcp.py"]
    nested = entry["args"]
    for flag in ("--unshare-net", "--unshare-pid", "--clearenv", "--die-with-parent"):
        assert flag in nested  # no network of the CLI's (its relay port), no process of its, no environment of its
    hidden = {nested[i + 1] for i, a in enumerate(nested) if a == "--tmpfs"}
    assert {"/proc", "/run/skillevo", "/tmp", "/dev/shm", "/home/agent"} <= hidden
    assert all("--size" in nested[i - 4:i] for i, a in enumerate(nested) if a == "--tmpfs")  # every tmpfs sized
    assert "--strict-mcp-config" in args and args[args.index("--allowedTools") + 1] == "Read,mcp__codeindex"
    bare = cli.argv(model="m", tools=("Read",))
    assert json.loads(bare[bare.index("--mcp-config") + 1]) == {"mcpServers": {}}


def test_the_candidate_arm_gets_its_incumbents_servers_and_they_are_in_the_cell_key(tmp_path):
    p = _params(server_arms(tmp_path))
    from skillevo.core.arms import candidate

    assert candidate(p.arms["work"]).mcp == p.arms["work"].mcp != ()
    assert p.arms["work_nomcp"].mcp == ()
    assert p.arms["work"].describe()["mcp"] == ["codeindex"] and "mcp" not in p.arms["work_nomcp"].describe()


def test_a_changed_server_file_is_another_cell(tmp_path):
    """The frozen files' digest is in every cell key of the arm: a server edited between benches is never served
    the cells its old version measured."""
    from skillevo.bench.cellstore import Context, key
    from skillevo.bench.sideplan import build_cells
    from skillevo.core import models

    tasks_file = _tasks(tmp_path)
    p = _params(server_arms(tmp_path))
    ctx = Context("h", 0, None)

    def keys(scratch: Path) -> dict[str, str]:
        side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
        cells = build_cells(side, p.bench, models.Model("m", "simulator", "http://x"), scratch)
        frozen = scratch / "mcp" / side.mcp.popitem()[0] / "codeindex_mcp.py"
        assert frozen.read_text() == (tmp_path / "mcp/codeindex/codeindex_mcp.py").read_text()
        assert not (frozen.stat().st_mode | frozen.parent.stat().st_mode) & 0o222  # no write bit anywhere
        return {c.name: key(c, ctx) for c in cells}

    before = keys(tmp_path / "s1")
    (tmp_path / "mcp/codeindex/codeindex_mcp.py").write_text(SERVER.replace("frozen server", "edited server"))
    after = keys(tmp_path / "s2")
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {name for name in before if "-work-" in name} != set()


@pytest.mark.parametrize("server, rule", [
    ({"command": "python3 -c evil", "dir": "x"}, "pattern"),  # a command is one word; its arguments go in args
    ({"command": "tools/server.sh", "dir": "x"}, "pattern"),  # a workspace path: the agent could rewrite it
    ({"command": "{dir}/../../../work/tools/server.sh", "dir": "x"}, "pattern"),
    ({"command": "python3"}, "required"),  # its files come from a folder of the repository, frozen
    ({"args": ["x"], "dir": "x"}, "required"),
])
def test_a_malformed_server_is_refused(server, rule):
    arms = {"work": {"sessions": WORK, "mcp": {"codeindex": server}}}
    with pytest.raises(BadInput) as e:
        _params(arms)
    assert "$.arms.work.mcp.codeindex" in str(e.value) and f"(rule: {rule})" in str(e.value)


@pytest.mark.parametrize("attack, rule", [("symlink", "no symlinks"), ("huge", "size"), ("empty", "own files"),
                                          ("missing", "inputs exist")])
def test_a_server_folder_that_cannot_be_frozen_is_refused_with_its_params_key(tmp_path, attack, rule):
    tasks_file = _tasks(tmp_path)
    folder = tmp_path / "mcp/codeindex"
    if attack == "symlink":
        (folder / "link.py").symlink_to("/etc/passwd")
    elif attack == "huge":
        with open(folder / "blob", "wb") as f:
            f.truncate(1 << 30)  # sparse: 1 GiB that costs the disk nothing
    elif attack == "empty":
        (folder / "codeindex_mcp.py").unlink()
    else:
        safefs_remove = __import__("shutil").rmtree
        safefs_remove(folder)
    with pytest.raises(BadInput) as e:
        plan("incumbent", tasks_file, ROOT / "skills", None, _params(server_arms(tmp_path)))
    assert "arms.work.mcp.codeindex.dir" in str(e.value) and rule in str(e.value)


@pytest.mark.cli
@pytest.mark.bwrap
def test_a_skill_that_needs_an_mcp_tool_is_measured_with_and_without_its_server(tmp_path):
    tasks_file = _tasks(tmp_path)
    p = _params(server_arms(tmp_path))
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    out = tmp_path / "out"
    rows = {r["arm"]: r for r in run_side(side, p, out, quiet=True, scratch_root=tmp_path)}
    with_server, without = rows["work"], rows["work_nomcp"]
    assert with_server["resolved"] is True, with_server["error_detail"]
    assert with_server["tool_uses"].get("mcp__codeindex__lookup") == 1
    assert without["resolved"] is False and without["error_kind"] == "no-work"
    assert without["tool_uses"].get("mcp__codeindex__lookup") == 1  # called, and no server answered
    # the transcripts hold the server's answer: from the workspace, in its sandbox, without network or relay
    [meta] = with_server["transcripts"]
    text = (out / meta["path"]).read_text()
    assert "defined in pkg/greet.py (no network, no relay, cwd /work, frozen server)" in text
    assert "defined in pkg/greet.py" not in (out / without["transcripts"][0]["path"]).read_text()
    bench = json.loads((out / "bench.json").read_text())
    assert {a["name"]: a.get("mcp") for a in bench["arms"]} == {"work": ["codeindex"], "work_nomcp": None}
    report = (out / "report.md").read_text()
    assert "| work | codeindex | `mcp__codeindex__lookup` | 1/1 |  |" in report
    assert "| work_nomcp | — | `mcp__codeindex__lookup` | 1/1 | **no server for it in this arm**" in report
    assert "- `plan`: no valid run of this side loaded it" in report  # both arms run the work skill only
    assert "- `work`:" not in report


# Session 1 (the plan skill) attacks the server the CLI starts for session 2: it overwrites the mounted file by its
# own path and through the frozen tree's host path, and drops a sitecustomize where a Python server would import it.
EVIL = "print('pwned')"
ATTACK = {"schema_version": 1, "unskilled": "work", "instructions": [], "tasks": [
    {"id": "greet", "match": "friendlier greeting", "sessions": {
        "plan": [{"bash": f"echo \"{EVIL}\" > /opt/skillevo/mcp/codeindex/codeindex_mcp.py; "
                          "chmod u+w /opt/skillevo/mcp/codeindex 2>&1; "
                          "mv /opt/skillevo/mcp/codeindex /opt/skillevo/mcp/x 2>&1; "
                          f"mkdir -p /tmp/sc && echo \"{EVIL}\" > /tmp/sc/sitecustomize.py; true"},
                 {"write": {"path": "docs/plan.md", "content": "1. make greet say hello\n"}}],
        "work": PLAYBOOK["tasks"][0]["sessions"]["work"]}}]}


@pytest.mark.cli
@pytest.mark.bwrap
def test_an_agent_cannot_rewrite_the_server_its_next_session_starts(tmp_path):
    tasks_file = _tasks(tmp_path)
    (tasks_file.parent / "playbooks/mcp.yaml").write_text(yaml.safe_dump(ATTACK))
    two = [{"skill": "plan", "prompt": "Use the plan skill for: {prompt}"}, *WORK]
    p = _params({"work": server_arms(tmp_path, two)["work"]})
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    out = tmp_path / "out"
    [row] = run_side(side, p, out, quiet=True, scratch_root=tmp_path)
    assert row["resolved"] is True, row["error_detail"]
    second = (out / row["transcripts"][1]["path"]).read_text()
    assert "defined in pkg/greet.py (no network, no relay, cwd /work, frozen server)" in second
    assert "pwned" not in second
    first = (out / row["transcripts"][0]["path"]).read_text()
    assert "Read-only file system" in first  # the write was tried, and refused by the mount


def test_the_report_names_a_tool_the_skills_name_that_runs_never_called():
    from skillevo.bench.report import mcp_use, named_mcp_tools

    named = named_mcp_tools([b"First call `mcp__codeindex__lookup` with the symbol.\n"])
    provenance = {"arms": [{"name": "work", "mcp": ["codeindex"]}]}
    row = {"arm": "work", "error_kind": None, "tool_uses": {"Read": 2}}
    lines = mcp_use(provenance, [row, dict(row)], named)
    never = "**never called**, though the skills name it (2 runs)"
    assert f"| work | codeindex | `mcp__codeindex__lookup` | 0/2 | {never} |" in lines
    assert mcp_use({"arms": [{"name": "work"}]}, [row], set()) == []  # no MCP anywhere: no section


@pytest.mark.cli
@pytest.mark.bwrap
@pytest.mark.parametrize("model", [
    {"backend": "simulator"},
    pytest.param({"backend": "openai", "name": "gpt-5-mini", "upstream": "simulator"}, marks=pytest.mark.gateway),
], ids=["anthropic-path", "gateway"])
def test_only_the_cli_reaches_the_relay_so_every_failure_it_books_is_a_request_of_the_clis(tmp_path, model):
    """The relay books an endpoint's failure as the API's (an excluded session-error) because no process in the cell
    but the CLI can send it a request: the agent's Bash runs in the CLI's own sandbox, its MCP servers in ours
    (issue 30, item 3). The probe tries the loopback port, the socket and every /proc/<pid>/root it can see."""
    tasks_file = _tasks(tmp_path)
    (tasks_file.parent / "targets/greet/probe.py").write_text(PROBE + "print('PROBE', relay_roads())\n")
    book = json.loads(json.dumps(PLAYBOOK))
    book["tasks"][0]["sessions"]["work"] = [{"bash": "python3 probe.py"}, *book["tasks"][0]["sessions"]["work"]]
    (tasks_file.parent / "playbooks/mcp.yaml").write_text(yaml.safe_dump(book))
    p = _params({"work": server_arms(tmp_path)["work"]}, model=model)
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    out = tmp_path / "out"
    [row] = run_side(side, p, out, quiet=True, scratch_root=tmp_path)
    assert row["backend"] == model["backend"]
    text = (out / row["transcripts"][0]["path"]).read_text()
    assert "PROBE no relay" in text and "relay via" not in text
    assert "(no network, no relay, cwd /work, frozen server)" in text
    assert row["resolved"] is True, row["error_detail"]


def test_an_edited_server_changes_the_bench_stages_identity_and_no_other(tmp_path):
    """The server's files are no declared dependency of any stage: the identity stage (run on every repro) puts
    their digest in the bench's identity file, so DVC re-runs the bench, and only the bench, when one changes."""
    from skillevo.stages import identity

    _tasks(tmp_path)
    doc = params_doc()
    doc["arms"] = server_arms(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(doc))

    def files(out: str) -> dict[str, str]:
        assert identity.main(["--params", str(tmp_path / "params.yaml"), "--out", str(tmp_path / out)]) == 0
        return {f.name: f.read_text() for f in (tmp_path / out).iterdir()}

    before = files("one")
    (tmp_path / "mcp/codeindex/codeindex_mcp.py").write_text(SERVER.replace("frozen server", "edited server"))
    after = files("two")
    assert {name for name in before if before[name] != after[name]} == {"bench.json"}
    assert "work.codeindex" in json.loads(after["bench.json"])["mcp_servers"]


def test_the_incumbent_report_names_a_skill_no_run_loaded():
    """Issue 32, item 3: offline, an auto arm picked one skill in every run and never the other evolvable one, and
    nothing said so; a candidate changing it had nothing to be measured by (the report's own section: the end to
    end test above reads it in a real side's report)."""
    from skillevo.bench.report import unloaded

    row = {"error_kind": None, "skills_loaded": [["fixer"]]}
    spoiled = {"error_kind": "infra-error", "skills_loaded": [["reviewer"]]}  # an excluded run loads nothing
    lines = unloaded(["fixer", "reviewer"], [row, spoiled])
    assert lines[0] == "## Skills no run loaded" and lines[2].startswith("- `reviewer`: no valid run of this side")
    assert not any("`fixer`" in line for line in lines)
    assert unloaded(["fixer"], [row]) == [] and unloaded(["fixer"], [spoiled]) == []
