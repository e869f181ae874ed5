"""What every part of apply shares: its errors, the paths it works on, and the test seam.

Kept apart so the tree, the transaction, recovery and the input checks raise the same errors and read the
same ApplyPaths without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from skillevo.core import layout
from skillevo.files import errors

SCHEMA_VERSION = 1
RECEIPT_SCHEMA = "apply-receipt"
RERUN = "run `dvc repro` first"

Fault = Callable[[str, int, "str | None"], None]
"""Test seam: called as fault(event, index, path) at before-mkdir and after-mkdir (around renaming a directory
made for new files into place), before-swap and after-swap (around each destination's swap, creation or
deletion), verified, committed and before-restore; whatever it raises is treated like any other failure at that
point."""
Log = Callable[[str], None]


class ApplyRefused(errors.BadInput):
    """Nothing was changed; the message names the reason."""


RolledBack = errors.RolledBack  # the transaction failed or was interrupted and every replaced original is back


class RollbackIncomplete(errors.RollbackIncomplete):
    """Some original could not be put back; `record` is the recovery record a rerun restores from."""

    def __init__(self, message: str, record: Path):
        super().__init__(message)
        self.record = record


class TransactionInterrupted(BaseException):
    """SIGINT/SIGTERM during a transaction: BaseException so no `except Exception` swallows it."""


@contextmanager
def refusals() -> Iterator[None]:
    """A BadInput from a shared module (a symlink, a schema, a bad params file) leaves apply as ApplyRefused."""
    try:
        yield
    except ApplyRefused:
        raise
    except errors.BadInput as e:
        raise ApplyRefused(str(e)) from None


@dataclass(frozen=True)
class ApplyPaths:
    """Every input and output of the stage (defaults = the DVC layout, relative to the working directory)."""

    promotion: Path = layout.PROMOTION
    freeze: Path = layout.FREEZE
    incumbent_bench: Path = layout.BENCH["incumbent"]
    params: Path = layout.PARAMS
    repo: Path = Path(".")  # the git repository whose skills are rewritten (params skills.root)
    pipeline: Path | None = None  # the folder of dvc.yaml and dvc.lock, which every input is checked against [repo]
    receipt: Path = layout.APPLY_RECEIPT
    candidate_bench: Path = layout.BENCH["candidate"]
    tasks: Path = layout.TASKS_FILE

    @property
    def state_dir(self) -> Path:
        """Receipt, originals store, recovery records and the lock live together."""
        return self.receipt.parent

    @property
    def originals(self) -> Path:
        return self.state_dir / "originals"


def no_fault(event: str, index: int, path: str | None) -> None:
    return None


def quiet(line: str) -> None:
    return None


def require_aware(now: datetime) -> None:
    if now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")


def utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()
