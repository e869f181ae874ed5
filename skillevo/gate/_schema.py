"""Input validation for the gate: every refusal of bad input names the file, the place and the broken rule."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"
_MAX_MESSAGE = 300  # jsonschema quotes whole instances; a refusal should stay one readable line


class GateInputError(ValueError):
    """Bad gate input (results, bench.json, freeze manifest, params): the stage exits non-zero on it."""


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """The schema `schemas/<name>.schema.json`, checked against draft 2020-12 once per process."""
    schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


@functools.cache
def schema_validator(name: str, definition: str | None = None) -> jsonschema.Draft202012Validator:
    """A named schema, or one of its `$defs` standalone (its siblings stay reachable through `#/$defs/...`)."""
    schema = load_schema(name)
    if definition is not None:
        schema = {"$defs": schema["$defs"], **schema["$defs"][definition]}
    return jsonschema.Draft202012Validator(schema)


def json_path(parts: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def first_error(document: Any, validator: jsonschema.Draft202012Validator) -> str | None:
    """The first violation by JSON path, as '$.path: message (rule: keyword)', or None when valid.

    Sorting makes the reported error the same on every run, whatever order jsonschema finds them in.
    """
    errors = sorted(
        validator.iter_errors(document),
        key=lambda e: ([(0, p) if isinstance(p, int) else (1, p) for p in e.absolute_path], e.validator),
    )
    if not errors:
        return None
    e = errors[0]
    message = e.message if len(e.message) <= _MAX_MESSAGE else e.message[: _MAX_MESSAGE - 3] + "..."
    return f"{json_path(e.absolute_path)}: {message} (rule: {e.validator})"


def view_validator(view: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """A schema for the fields the gate reads from another stage's file, reusing promotion.json's `$defs`.

    Views leave other fields alone: the writing stage's own schema owns the rest of its file.
    """
    return jsonschema.Draft202012Validator({"$defs": load_schema("promotion")["$defs"], **view})
