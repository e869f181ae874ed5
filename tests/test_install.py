"""The one installer of the pinned CLI (skillevo.agent.install): two installs into one prefix at once take turns."""

from __future__ import annotations

import threading
import time

from skillevo.agent import install
from skillevo.core.pins import CLAUDE_CODE_VERSION

# npm's way with a prefix, at the speed of a slow download: node_modules/ is replaced whole, the binary comes last
FAKE_NPM = f"""#!/bin/sh
prefix=$3
echo run >> "$prefix/npm-runs"
rm -rf "$prefix/node_modules"
sleep 1
mkdir -p "$prefix/node_modules/.bin"
printf '#!/bin/sh\\necho "{CLAUDE_CODE_VERSION} (Claude Code)"\\n' > "$prefix/node_modules/.bin/claude"
chmod +x "$prefix/node_modules/.bin/claude"
"""


def test_two_installs_into_one_prefix_at_once_run_npm_once_and_both_get_the_binary(monkeypatch, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "npm").write_text(FAKE_NPM)
    (bindir / "npm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    prefix = tmp_path / "prefix"
    got, failed = [], []

    def setup() -> None:
        try:
            got.append(install.install(prefix))
        except Exception as e:  # noqa: BLE001 - the test reports it
            failed.append(e)

    first = threading.Thread(target=setup)
    first.start()
    time.sleep(0.5)  # the second starts while the first one's npm is at work
    second = threading.Thread(target=setup)
    second.start()
    first.join(30)
    second.join(30)
    assert not failed, failed
    assert got == [prefix / install.BIN] * 2
    assert (prefix / "npm-runs").read_text() == "run\n"  # the second waited, then found it installed
    assert install.install(prefix) == prefix / install.BIN  # and a third needs no npm at all
    assert (prefix / "npm-runs").read_text() == "run\n"
