"""Clear failures when the machine lacks what sessions need."""

from __future__ import annotations

import pytest

from skillevo import sandbox
from skillevo.agent import cli


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


def test_argv_never_carries_a_credential():
    argv = cli.argv(model="claude-sonnet-4-5", tools=("Read",))
    assert not any("sk-ant" in a for a in argv)
    assert argv[argv.index("--setting-sources") + 1] == "project"
    assert "--strict-mcp-config" in argv and "--settings" in argv


def test_relay_refuses_endpoints_with_credentials(tmp_path):
    with pytest.raises(ValueError, match="no credentials"):
        sandbox.Relay("https://user:pw@example.invalid", None, tmp_path)
