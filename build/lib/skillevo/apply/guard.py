"""What keeps a transaction whole against other processes: the state-directory lock and the signal guard.

One apply, revert or recovery runs at a time per state directory; SIGINT/SIGTERM unwind a transaction
(and so roll it back) only until its point of no return, after which they are noted and the work finishes.
"""

from __future__ import annotations

import fcntl
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from skillevo.apply.common import ApplyRefused, TransactionInterrupted


@contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    """One apply, revert or recovery at a time per state directory."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ApplyRefused(f"another apply or revert holds {state_dir / '.lock'}; wait for it to finish") from None
        yield
    finally:
        os.close(fd)


class SignalGuard:
    """SIGINT/SIGTERM become TransactionInterrupted until defer(); afterwards they are noted, never allowed to
    cut a rollback or a commit short. Previous handlers come back on exit."""

    def __init__(self) -> None:
        self.deferring = False
        self.pending: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        if self.deferring:
            self.pending = signum
            return
        self.deferring = True
        raise TransactionInterrupted(f"interrupted by {signal.Signals(signum).name}")

    def defer(self) -> None:
        self.deferring = True

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
