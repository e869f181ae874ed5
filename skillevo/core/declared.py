"""The params a stage reads, declared by the stage and held to it.

DVC re-runs a stage when a param its dvc.yaml entry lists changes, and only then: a key the code reads but the entry
does not list leaves the stage's outputs stale after `dvc exp run -S key=...`, silently. So each stage script names
the keys it reads (`Declared`: what DVC tracks, and what it reads that cannot change its outputs), its params come
to it through `guard`, which refuses any other key the moment it is read, and tests/test_declared_params.py holds
dvc.yaml and the template `skillevo init` writes to the same lists.

Keys are the YAML's dotted paths; a key covers everything below it (`sampling` covers `sampling.runs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from skillevo.core.config import LOOKS_READ_FROM_GATE
from skillevo.files.errors import InternalError

# Typed attributes whose YAML key differs, and properties with the keys they are computed from
ALIASES = {"skills.skills": ("skills.paths.skills",), "skills.mirrors": ("skills.paths.mirrors",),
           "skills.roots": ("skills.paths",), "proposer_model": ("propose.model", "model.name"),
           "model.simulated": ("model.backend", "model.upstream"),
           **{f"sampling.sequential.{key}": (f"gate.{key}",) for key in LOOKS_READ_FROM_GATE}}
NOT_PARAMS = frozenset({"source", "notes"})  # where params came from and its warnings: no key of the file


class UndeclaredParam(InternalError):
    """A stage read a key it does not declare: a bug of the stage (its dvc.yaml entry would not track the key)."""


@dataclass(frozen=True)
class Declared:
    tracked: tuple[str, ...]  # the stage's `params:` in dvc.yaml: a change re-runs it
    untracked: tuple[str, ...] = ()  # read, but cannot change what the stage writes (how many workers, say)

    @property
    def keys(self) -> tuple[str, ...]:
        return (*self.tracked, *self.untracked)


def covered(key: str, keys: Iterable[str]) -> bool:
    return any(key == k or key.startswith(k + ".") for k in keys)


def _above(key: str, keys: Iterable[str]) -> bool:
    """Some declared key lies below `key`: a section read for part of what it holds."""
    return any(k.startswith(key + ".") for k in keys)


class _View:
    """A read-only view of a params object (Params or one of its sections) that lets through declared keys only."""

    __slots__ = ("_obj", "_path", "_keys", "_stage")

    def __init__(self, obj: Any, path: str, keys: tuple[str, ...], stage: str) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_keys", keys)
        object.__setattr__(self, "_stage", stage)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._obj, name)
        key = f"{self._path}.{name}" if self._path else name
        if not self._path and name in NOT_PARAMS:
            return value
        needs = ALIASES.get(key, (key,))
        section = key not in ALIASES and dataclasses.is_dataclass(value)
        if section and any(alias.startswith(key + ".") for alias in ALIASES):
            return _View(value, key, self._keys, self._stage)  # it holds a key read from elsewhere: look inside
        if all(covered(k, self._keys) for k in needs):
            return value
        if section and _above(key, self._keys):
            return _View(value, key, self._keys, self._stage)
        raise UndeclaredParam(f"stage {self._stage} read params key {', '.join(needs)}, which it does not declare "
                              f"(declared: {', '.join(self._keys)}); add it to the stage's PARAMS and its dvc.yaml "
                              "entry (rule: a stage reads only the params it declares)")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("params are read-only")

    def __repr__(self) -> str:
        return f"<params {self._path or 'root'} as stage {self._stage} declares them>"


def guard(params: Any, declared: Declared, stage: str) -> Any:
    """`params` as the stage may read them."""
    return _View(params, "", declared.keys, stage)
