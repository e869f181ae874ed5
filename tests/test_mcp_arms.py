"""MCP servers per arm, end to end: a skill that tells the agent to call an MCP tool is measured through the real
CLI in bwrap, with the team's stdio server (a script in the target repository) started by the CLI inside the cell's
sandbox. The arm that has the server resolves; the same skill in an arm without it has nothing to go on; both
sessions' calls are counted in rows and transcripts, and the report names the runs that never called the tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from skillevo.agent import cli
from skillevo.bench import plan, run_side
from skillevo.core import config
from skillevo.core.arms import McpServer
from skillevo.core.errors import BadInput
from tests.bench_fixtures import ROOT, params_doc

# A minimal stdio MCP server, as a team would keep one in its repository: newline-delimited JSON-RPC 2.0. Its one
# tool answers from the repository (so it runs where the workspace is) and writes where it ran (to show it runs
# inside the sandbox, whose network namespace has only loopback).
SERVER = r'''
import json, os, socket, sys
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
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [
              {"type": "text", "text": f"defined in {found[0] if found else 'nowhere'} ({net}, cwd {os.getcwd()})"}]}})
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

SERVER_ARMS = {"work": {"sessions": [{"skill": "work", "prompt": "Use the work skill. {prompt}"}],
                        "mcp": {"codeindex": {"command": "python3", "args": ["tools/codeindex_mcp.py"]}}},
               "work_nomcp": {"sessions": [{"skill": "work", "prompt": "Use the work skill. {prompt}"}]}}


def _tasks(root: Path) -> Path:
    tasks = root / "tasks"
    (tasks / "targets/greet/pkg").mkdir(parents=True)
    (tasks / "targets/greet/pkg/__init__.py").write_text("")
    (tasks / "targets/greet/pkg/greet.py").write_text('def greet():\n    return "hi"\n')
    (tasks / "targets/greet/tools").mkdir()
    (tasks / "targets/greet/tools/codeindex_mcp.py").write_text(SERVER)
    (tasks / "oracles").mkdir()
    (tasks / "oracles/test_greet_oracle.py").write_text(
        "from pkg.greet import greet\n\n\ndef test_greet_says_hello():\n    assert greet() == 'hello'\n")
    (tasks / "playbooks").mkdir()
    (tasks / "playbooks/mcp.yaml").write_text(yaml.safe_dump(PLAYBOOK))
    (tasks / "tasks.yaml").write_text(yaml.safe_dump(TASKS))
    return tasks / "tasks.yaml"


def _params(arms: dict) -> config.Params:
    doc = params_doc()
    doc["arms"] = arms
    return config.parse(doc)


def test_an_arms_servers_reach_the_cli_as_its_only_mcp_config_and_allowed_tools():
    server = McpServer("codeindex", "python3", ("tools/codeindex_mcp.py",))
    args = cli.argv(model="m", tools=("Read",), mcp=(server,))
    config_json = json.loads(args[args.index("--mcp-config") + 1])
    assert config_json == {"mcpServers": {"codeindex": {"type": "stdio", "command": "python3",
                                                        "args": ["tools/codeindex_mcp.py"], "env": {}}}}
    assert "--strict-mcp-config" in args and args[args.index("--allowedTools") + 1] == "Read,mcp__codeindex"
    bare = cli.argv(model="m", tools=("Read",))
    assert json.loads(bare[bare.index("--mcp-config") + 1]) == {"mcpServers": {}}


def test_the_candidate_arm_gets_its_incumbents_servers_and_they_are_in_the_cell_key():
    p = _params(SERVER_ARMS)
    from skillevo.core.arms import candidate

    assert candidate(p.arms["work"]).mcp == p.arms["work"].mcp != ()
    assert p.arms["work_nomcp"].mcp == ()
    assert p.arms["work"].describe()["mcp"] == ["codeindex"] and "mcp" not in p.arms["work_nomcp"].describe()


@pytest.mark.parametrize("server, rule", [
    ({"command": "python3 -c evil"}, "pattern"),  # a command is one word; its arguments go in args
    ({"args": ["x"]}, "required"),
])
def test_a_malformed_server_is_refused(server, rule):
    arms = {"work": {"sessions": SERVER_ARMS["work"]["sessions"], "mcp": {"codeindex": server}}}
    with pytest.raises(BadInput) as e:
        _params(arms)
    assert "$.arms.work.mcp.codeindex" in str(e.value) and f"(rule: {rule})" in str(e.value)


@pytest.mark.cli
@pytest.mark.bwrap
def test_a_skill_that_needs_an_mcp_tool_is_measured_with_and_without_its_server(tmp_path):
    tasks_file = _tasks(tmp_path)
    p = _params(SERVER_ARMS)
    side = plan("incumbent", tasks_file, ROOT / "skills", None, p)
    out = tmp_path / "out"
    rows = {r["arm"]: r for r in run_side(side, p, out, quiet=True, scratch_root=tmp_path)}
    with_server, without = rows["work"], rows["work_nomcp"]
    assert with_server["resolved"] is True, with_server["error_detail"]
    assert with_server["tool_uses"].get("mcp__codeindex__lookup") == 1
    assert without["resolved"] is False and without["error_kind"] == "no-work"
    assert without["tool_uses"].get("mcp__codeindex__lookup") == 1  # called, and no server answered
    # the transcripts hold the server's answer: from the workspace, inside the sandbox, without network
    [meta] = with_server["transcripts"]
    text = (out / meta["path"]).read_text()
    assert "defined in pkg/greet.py (no network, cwd /work)" in text
    assert "defined in pkg/greet.py" not in (out / without["transcripts"][0]["path"]).read_text()
    bench = json.loads((out / "bench.json").read_text())
    assert {a["name"]: a.get("mcp") for a in bench["arms"]} == {"work": ["codeindex"], "work_nomcp": None}
    report = (out / "report.md").read_text()
    assert "| work | codeindex | `mcp__codeindex__lookup` | 1/1 |  |" in report
    assert "| work_nomcp | — | `mcp__codeindex__lookup` | 1/1 | **no server for it in this arm**" in report


def test_the_report_names_a_tool_the_skills_name_that_runs_never_called():
    from skillevo.bench.report import mcp_use, named_mcp_tools

    named = named_mcp_tools([b"First call `mcp__codeindex__lookup` with the symbol.\n"])
    provenance = {"arms": [{"name": "work", "mcp": ["codeindex"]}]}
    row = {"arm": "work", "error_kind": None, "tool_uses": {"Read": 2}}
    lines = mcp_use(provenance, [row, dict(row)], named)
    never = "**never called**, though the skills name it (2 runs)"
    assert f"| work | codeindex | `mcp__codeindex__lookup` | 0/2 | {never} |" in lines
    assert mcp_use({"arms": [{"name": "work"}]}, [row], set()) == []  # no MCP anywhere: no section
