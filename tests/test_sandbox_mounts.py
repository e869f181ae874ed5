"""Every place a contained process can write is sized or read-only. Code under test (imported by verify) once
wrote 2,000 MB into the sandbox's `/`, `/etc` and `/run`: bubblewrap's root is a tmpfs it cannot size, which
holds the host's memory, and no limit of the cell (memory 1,536 MB, disk 256 MB) fired. Now the root and /dev are
read-only once every mount point is made, and /tmp, HOME and /dev/shm are tmpfs mounts of bench.limits.tmp_mb."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillevo.core.limits import Limits
from skillevo.sandbox import bwrap, process

pytestmark = pytest.mark.bwrap

# Write 4 MiB files into each place, up to past its tmpfs's size (/dev/shm: past SHM_MB), or to the first error.
FLOOD = """
import errno, json, os
out = {}
for place in ("/", "/etc", "/run", "/opt", "/home", "/dev", "/dev/shm", "/tmp", "/home/agent"):
    written, error = 0, None
    try:
        for i in range(20 if place == "/dev/shm" else 8):
            with open(os.path.join(place, f"flood-{i}"), "wb") as f:
                f.write(b"x" * (4 << 20))
            written += 4
    except OSError as e:
        error = errno.errorcode.get(e.errno, str(e.errno))
    out[place] = [written, error]
print(json.dumps(out))
"""
LIMITS = Limits(processes=64, memory_mb=1536, cpu_s=60, disk_mb=64, tmp_mb=16, file_mb=64)


@pytest.mark.parametrize("limits", [LIMITS, None], ids=["a cell", "the proposer"])
def test_a_flood_meets_a_read_only_root_and_sized_tmpfs_mounts(tmp_path: Path, limits: Limits | None):
    (tmp_path / "ws").mkdir()
    (tmp_path / "relay").mkdir()
    spec = bwrap.SandboxSpec(workspace=tmp_path / "ws", private=tmp_path / "private", env=bwrap.base_env(),
                             relay_socket_dir=tmp_path / "relay", limits=limits)
    done = process.run(bwrap.command(spec, ["python3", "-c", FLOOD]), timeout_s=120)
    assert done.returncode == 0, done.stderr_tail.decode(errors="replace")
    places = json.loads(done.stdout)
    for place in ("/", "/etc", "/run", "/opt", "/home", "/dev"):  # the unsized tmpfs mounts take nothing
        assert places[place] == [0, "EROFS"], (place, places[place])
    shm = limits.tmp_mb if limits is not None else bwrap.SHM_MB
    assert places["/dev/shm"][1] == "ENOSPC" and places["/dev/shm"][0] <= shm, places["/dev/shm"]
    if limits is not None:  # without per-cell limits, /tmp and HOME are the caller's private directories
        for place in ("/tmp", "/home/agent"):
            assert places[place][1] == "ENOSPC" and places[place][0] <= limits.tmp_mb, (place, places[place])
    probe = process.run(bwrap.command(spec, ["sh", "-c", "echo ok > /dev/null && python3 -c 'import multiprocessing "
                                                         "as m; q = m.Queue(); q.put(1); print(q.get())'"]),
                        timeout_s=60)
    assert probe.stdout.strip() == b"1"  # devices still write, and a semaphore lives in /dev/shm
