"""Clear failures when the machine lacks what sessions need: in the library, and as the stage's one line."""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from skillevo import sandbox
from skillevo.agent import SessionSpec, cli, install, run_session
from skillevo.core import models, pins
from skillevo.files import safefs
from skillevo.files.errors import BrokenEnvironment
from skillevo.sandbox import process
from skillevo.simulator import Simulator, demo
from skillevo.stages import bench as bench_stage
from skillevo.stages import gate as gate_stage
from tests.bench_fixtures import ROOT, make_mini, write_params
from tests.conftest import PLANTED_KEY, PROMPT, make_workspace


def test_missing_cli_names_skillevo_setup(monkeypatch, tmp_path):
    monkeypatch.setenv("SKILLEVO_CLAUDE", str(tmp_path / "nope"))
    monkeypatch.setattr(cli, "LOCAL_CLI", tmp_path / "also-nope")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(cli.CLIMissing, match="run `skillevo setup`"):
        cli.locate()


def test_the_users_install_is_found_and_setup_installs_nothing_twice(monkeypatch, tmp_path):
    """`skillevo setup` installs into $XDG_DATA_HOME/skillevo; locate() finds it there, and a second setup finds it
    installed (no npm needed: PATH has none here)."""
    monkeypatch.setenv("SKILLEVO_CLAUDE", str(tmp_path / "nope"))
    monkeypatch.setattr(cli, "LOCAL_CLI", tmp_path / "also-nope")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(BrokenEnvironment, match="npm is not installed"):
        install.install(install.default_prefix())
    fake = install.default_prefix() / install.BIN
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!/bin/sh\necho '{pins.CLAUDE_CODE_VERSION} (Claude Code)'\n")
    fake.chmod(0o755)
    assert install.install(install.default_prefix()) == fake
    assert cli.locate() == fake.resolve()


def test_wrong_cli_version_is_refused(monkeypatch, tmp_path):
    fake = tmp_path / "claude"
    fake.write_text("#!/bin/sh\necho '0.0.1 (Claude Code)'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("SKILLEVO_CLAUDE", str(fake))
    monkeypatch.setattr(cli, "LOCAL_CLI", tmp_path / "absent")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(cli.CLIMissing, match=r"version 0\.0\.1.*skillevo setup"):
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
                                         endpoint=sim.url(), transcript_dir=tmp_path / "t", transcript_name="key",
                                         credential=models.Credential(models.API_KEY_ENV, PLANTED_KEY),
                                         expected_skill="work", timeout_s=90))
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


# --- the same, as a user meets it: the stage says it in one line and exits 69 -----------------------------

ENVIRONMENT = 69


def _bench_args(tmp_path, **params_sections) -> list[str]:
    tasks_file = make_mini(tmp_path)
    params_file = write_params(tmp_path / "params.yaml", **params_sections)
    return ["--side", "incumbent", "--tasks", str(tasks_file), "--skills", str(ROOT / "skills"),
            "--params", str(params_file), "--out", str(tmp_path / "out")]


def _one_line(err: str, pattern: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.search(pattern, lines[0]), lines[0]


def test_a_machine_without_bwrap_gets_one_line_and_exit_69(tmp_path):
    result = subprocess.run([sys.executable, "-m", "skillevo.stages.bench", *_bench_args(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, env={**os.environ, "PATH": str(tmp_path)})
    assert result.returncode == ENVIRONMENT, result.stderr
    _one_line(result.stderr, r"^bench: environment: bubblewrap \(bwrap\) is not installed: run `make setup`")
    assert not (tmp_path / "out").exists()


@pytest.mark.bwrap
def test_a_missing_cli_gets_one_line_and_exit_69(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SKILLEVO_CLAUDE", str(tmp_path / "nope"))
    monkeypatch.setattr(cli, "LOCAL_CLI", tmp_path / "also-nope")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PATH", ":".join(p for p in os.environ["PATH"].split(":") if not (Path(p) / "claude").exists()))
    assert bench_stage.main(_bench_args(tmp_path)) == ENVIRONMENT
    _one_line(capsys.readouterr().err, r"^bench: environment: the pinned Claude Code CLI .* run `skillevo setup`")
    assert not (tmp_path / "out").exists()


@pytest.mark.cli
@pytest.mark.bwrap
def test_an_endpoint_that_does_not_answer_gets_one_line_before_any_cell(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(models.AUTH_TOKEN_ENV, "a-gateway-token")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        args = _bench_args(tmp_path, model={"backend": "endpoint", "base_url": f"http://127.0.0.1:{port}"})
        assert bench_stage.main(args) == ENVIRONMENT
    _one_line(capsys.readouterr().err, rf"^bench: environment: model endpoint http://127\.0\.0\.1:{port} does not "
                                       r"answer .*\(rule: reachable endpoint\)")
    assert not (tmp_path / "out").exists()


@pytest.mark.cli
@pytest.mark.bwrap
def test_a_real_backend_without_a_credential_gets_one_line_before_any_cell(monkeypatch, tmp_path, capsys):
    for name in models.CREDENTIAL_ENVS:
        monkeypatch.delenv(name, raising=False)
    args = _bench_args(tmp_path, model={"backend": "endpoint", "base_url": "http://127.0.0.1:9"})
    assert bench_stage.main(args) == ENVIRONMENT
    _one_line(capsys.readouterr().err, r"^bench: environment: model\.backend is endpoint but neither "
                                       r"ANTHROPIC_AUTH_TOKEN .* nor ANTHROPIC_API_KEY is set .*\(rule: a credential "
                                       r"from the environment\)$")
    assert not (tmp_path / "out").exists()


def test_a_full_disk_gets_one_line_and_exit_69(monkeypatch, tmp_path, capsys):
    from tests.test_gate_stage import setup_inputs

    args = setup_inputs(tmp_path)

    def full(dir_fd, name, data, *, mode=0o644):
        raise OSError(errno.ENOSPC, "No space left on device", str(name))

    monkeypatch.setattr(safefs, "create_at", full)
    assert gate_stage.main(args) == ENVIRONMENT
    _one_line(capsys.readouterr().err, r"^gate: environment: .*promotion\.json.*: the disk is full")
