"""A git target's tree is unpacked under tarfile's "data" filter rules with or without the filter (Python 3.11.0 to
3.11.3 lack it: the image's Debian 3.11.2, where every git-target task once failed with a TypeError)."""

from __future__ import annotations

import io
import tarfile

import pytest

from skillevo.files import archives
from skillevo.files.errors import BadInput


def _tar(*members: tuple[str, str, bytes | str]) -> bytes:
    """A tar of (name, kind, content-or-link-target) members, kind one of file, dir, sym, link, fifo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, arg in members:
            info = tarfile.TarInfo(name)
            info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE,
                         "link": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            info.mode = 0o4777 if kind == "file" else 0o755
            if kind in ("sym", "link"):
                info.linkname = arg
            data = arg if kind == "file" else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


@pytest.mark.parametrize("without_filter", [False, True])
@pytest.mark.parametrize("member", [("a/../../up", "file", b"x"), ("out", "sym", "../x"),
                                    ("abs", "sym", "/etc/passwd"), ("hard", "link", "../x"), ("pipe", "fifo", "")])
def test_extract_tar_refuses_what_would_leave_the_destination(tmp_path, monkeypatch, member, without_filter):
    """The same rules with tarfile's data filter and without it (Python 3.11.0-3.11.3, the image's Debian 3.11.2)."""
    if without_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    with tarfile.open(fileobj=io.BytesIO(_tar(("ok", "file", b"fine"), member))) as tar:
        with pytest.raises((BadInput, getattr(tarfile, "FilterError", BadInput))):
            archives.extract_tar(tar, tmp_path / "dest", tar.getmembers(), "t")
    assert not (tmp_path / "x").exists() and not (tmp_path / "up").exists()


@pytest.mark.parametrize("without_filter", [False, True])
def test_extract_tar_keeps_files_dirs_and_inner_links_without_special_bits(tmp_path, monkeypatch, without_filter):
    if without_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    data = _tar(("d", "dir", ""), ("d/f", "file", b"hello"), ("d/l", "sym", "f"), ("/abs", "file", b"in"))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        archives.extract_tar(tar, tmp_path / "dest", tar.getmembers(), "t")
    assert (tmp_path / "dest/d/l").read_bytes() == b"hello" and (tmp_path / "dest/d/l").is_symlink()
    assert (tmp_path / "dest/d/f").stat().st_mode & 0o7777 == 0o755  # setuid and group/other write dropped
    assert (tmp_path / "dest/abs").read_bytes() == b"in"  # an absolute name lands inside
