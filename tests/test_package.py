"""`pip install` of this project gives a `skillevo` command that works outside the checkout: the wheel carries the
schemas, the proposer prompt, the sandbox launcher and the checks' bootstrap (one copy of each, inside the
package), installs no top-level `stages` or `tests`, and computes the same harness identity as the checkout.

The wheel is built offline from a copy of the sources (--no-build-isolation: the dev extra pins setuptools) and
installed without dependencies into a fresh venv that sees this venv's site-packages for them, then run from an
empty directory, so nothing of the checkout is on its path."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from skillevo.bench import harness
from tests.wheel import fresh_install

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("skillevo/schemas/params.schema.json", "skillevo/schemas/promotion.schema.json",
           "skillevo/prompts/propose.md", "skillevo/sandbox/launch.sh", "skillevo/bench/pyboot/sitecustomize.py",
           "skillevo/bench/pyboot/pytest.ini", "skillevo/stages/bench.py", "skillevo/commands.py",
           "skillevo/template/pipeline.yaml")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the wheel, the fresh venv's python)."""
    return fresh_install(tmp_path_factory.mktemp("package"))


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(cwd)})


def test_the_wheel_ships_the_data_files_and_no_top_level_stages(installed):
    wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    for rel in SHIPPED:
        assert rel in names, rel
    tops = {name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"skillevo"}, tops
    assert any(n.endswith("entry_points.txt") for n in names)


def test_the_installed_command_runs_outside_the_checkout(installed, tmp_path):
    _, python = installed
    skillevo = python.parent / "skillevo"
    done = subprocess.run([str(skillevo), "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("skillevo 0."), done.stderr
    done = subprocess.run([str(skillevo), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "apply" in done.stdout and "setup" in done.stdout
    done = _run(python, "-m", "skillevo.stages.gate", "--help", cwd=tmp_path)
    assert done.returncode == 0 and "promotion.json" in done.stdout, done.stderr
    probe = ("import skillevo, json\nfrom skillevo.files.schemas import load_schema\n"
             "from skillevo.bench import harness\nfrom skillevo import propose\n"
             "load_schema('params'); load_schema('result-row')\n"
             "print(json.dumps([skillevo.__file__, propose.PROMPT.is_file(), harness.code_digest()]))")
    done = _run(python, "-c", probe, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    where, prompt, digest = json.loads(done.stdout)
    assert not where.startswith(str(ROOT)) and prompt
    assert digest == harness.code_digest()  # the same code is the same harness, wherever it is installed


def test_an_unknown_command_is_refused_with_the_list(installed, tmp_path):
    _, python = installed
    done = subprocess.run([str(python.parent / "skillevo"), "aply"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "unknown command 'aply'" in done.stderr and "revert" in done.stderr


@pytest.mark.bwrap
def test_the_installed_package_runs_a_sandbox(installed, tmp_path):
    """The launcher every sandbox starts with ships as package data, whose execute bit an install need not keep:
    it is run by bash, so a sandbox works from the wheel."""
    _, python = installed
    probe = ("import sys\nfrom pathlib import Path\nfrom skillevo import sandbox\n"
             "ws = Path(sys.argv[1]); ws.mkdir()\n"
             "done = sandbox.run(sandbox.SandboxSpec(workspace=ws, private=Path(sys.argv[2]), env=sandbox.base_env()),"
             " ['/bin/echo', 'contained'], timeout_s=60)\n"
             "print(done.state, done.returncode, done.stdout.decode().strip(), done.stderr_tail.decode().strip())")
    done = _run(python, "-c", probe, str(tmp_path / "ws"), str(tmp_path / "private"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["exited", "0", "contained"], done.stdout
