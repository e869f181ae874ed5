"""A fresh install of the working tree's skillevo: the wheel built offline from a copy of the sources
(--no-build-isolation: the dev extra pins setuptools), installed without dependencies into a new venv that sees
this venv's site-packages for them; nothing of the checkout is on its path."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import tarfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fresh_install(tmp: Path) -> tuple[Path, Path]:
    """(the wheel, the fresh venv's python)."""
    src = tmp / "src"
    src.mkdir(parents=True)
    (src / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    # the working tree, not the last commit: copy what git tracks or would track
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard",
                            "skillevo", "stages", "schemas"], capture_output=True, text=True, check=True).stdout.split()
    for rel in files:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / rel).is_symlink():  # skillevo/stages and skillevo/schemas: links to the top-level directories
            (src / rel).symlink_to(os.readlink(ROOT / rel))
        elif (ROOT / rel).is_file():
            (src / rel).write_bytes((ROOT / rel).read_bytes())
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist),
                    str(src)], check=True, capture_output=True, timeout=300)
    [wheel] = dist.glob("skillevo-*.whl")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin/python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")  # the dependencies, not us
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    str(wheel)], check=True, capture_output=True, timeout=300)
    return wheel, python


def sdist_tree(tmp: Path, spec: str, name: str) -> Path:
    """A real library's source release from the package index (`spec`, e.g. six==1.17.0), unpacked at tmp/name:
    the tree a team's repository starts from in the adoption tests."""
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps", "-d",
                    str(tmp / "sdist"), spec], check=True, capture_output=True, timeout=300)
    [sdist] = (tmp / "sdist").glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp / "unpacked", filter="data")
    [src] = (tmp / "unpacked").iterdir()
    return src.rename(tmp / name)
