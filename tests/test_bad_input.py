"""Clear failures when the machine lacks what sessions need."""

from __future__ import annotations

import pytest

from skillevo import sandbox
from skillevo.agent import SessionSpec, cli, run_session
from skillevo.sandbox import process
from skillevo.simulator import Simulator, demo
from tests.conftest import PLANTED_KEY, PROMPT, make_workspace


def test_missing_cli_names_make_setup(monkeypatch, tmp_path):
    monkeypatch.setenv("SKILLEVO_CLAUDE", str(tmp_path / "nope"))
    monkeypatch.setattr(cli, "LOCAL_CLI", tmp_path / "also-nope")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(cli.CLIMissing, match="make setup"):
        cli.locate()


def test_wrong_cli_version_is_refused(monkeypatch, tmp_path):
    fake = tmp_path / "claude"
    fake.write_text("#!/bin/sh\necho '0.0.1 (Claude Code)'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("SKILLEVO_CLAUDE", str(fake))
    monkeypatch.setattr(cli, "LOCAL_CLI", tmp_path / "absent")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(cli.CLIMissing, match=r"version 0\.0\.1.*make setup"):
        cli.locate()


def test_missing_bwrap_is_reported_before_any_session(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(sandbox.SandboxUnavailable, match="bubblewrap"):
        sandbox.preflight()


@pytest.mark.bwrap
def test_preflight_passes_here():
    sandbox.preflight()


@pytest.mark.cli
@pytest.mark.bwrap
def test_a_real_key_reaches_the_endpoint_but_no_argv_or_sandbox_environment(monkeypatch, tmp_path, book):
    """Every process a session starts is recorded (argv and environment); the key must be in none of them,
    although the endpoint, which refuses any other key, answered the whole session."""
    spawned: list[tuple[list[str], dict[str, str]]] = []
    real_popen = process.subprocess.Popen

    def recording_popen(argv, *args, **kwargs):
        spawned.append((list(argv), dict(kwargs.get("env") or {})))
        return real_popen(argv, *args, **kwargs)

    monkeypatch.setattr(process.subprocess, "Popen", recording_popen)
    with Simulator(book, api_key=PLANTED_KEY) as sim:
        record = run_session(SessionSpec(prompt=PROMPT, workspace=make_workspace(tmp_path), model=demo.MODEL,
                                         endpoint=sim.url(), api_key=PLANTED_KEY, transcript_dir=tmp_path / "t",
                                         transcript_name="key", expected_skill="work", timeout_s=90))
    assert record["ok"], record["error_detail"]  # the key did arrive: the simulator refuses any other
    assert spawned and any("bwrap" in argv[0] for argv, _ in spawned)
    for argv, env in spawned:
        assert not any(PLANTED_KEY in a for a in argv), argv[:3]
        assert not any(PLANTED_KEY in v for v in env.values()), sorted(env)
    argv = cli.argv(model=demo.MODEL, tools=("Read",))
    assert argv[argv.index("--setting-sources") + 1] == "project"
    assert "--strict-mcp-config" in argv and "--settings" in argv


def test_relay_refuses_endpoints_with_credentials(tmp_path):
    with pytest.raises(ValueError, match="no credentials"):
        sandbox.Relay("https://user:pw@example.invalid", None, tmp_path)
