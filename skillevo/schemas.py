"""Load the project's JSON Schemas and validate untrusted documents against them.

Errors name the file, the JSON path and the rule, so a user can fix a bad input without reading code.
The first error is chosen by path, so the same bad document gives the same message on every run.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
_MAX_MESSAGE = 300  # jsonschema quotes whole instances; a refusal should stay one readable line


class InvalidDocument(ValueError):
    """An input failed its schema; the message says which file, where and why."""


def _file(name: str) -> str:
    return name if name.endswith(".json") else f"{name}.schema.json"


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """`schemas/<name>.schema.json` (or `schemas/<name>` when it ends in .json), checked against 2020-12 once."""
    schema = json.loads((SCHEMA_DIR / _file(name)).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


@functools.cache
def schema_validator(name: str, definition: str | None = None) -> jsonschema.Draft202012Validator:
    """A named schema, or one of its `$defs` standalone (its siblings stay reachable through `#/$defs/...`)."""
    schema = load_schema(name)
    if definition is not None:
        schema = {"$defs": schema["$defs"], **schema["$defs"][definition]}
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def json_path(parts: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def first_error(document: Any, validator: jsonschema.Draft202012Validator) -> str | None:
    """The first violation by JSON path, as '$.path: message (rule: keyword)', or None when valid."""
    errors = sorted(
        validator.iter_errors(document),
        key=lambda e: ([(0, p) if isinstance(p, int) else (1, p) for p in e.absolute_path], e.validator),
    )
    if not errors:
        return None
    e = errors[0]
    message = e.message if len(e.message) <= _MAX_MESSAGE else e.message[: _MAX_MESSAGE - 3] + "..."
    return f"{json_path(e.absolute_path)}: {message} (rule: {e.validator})"


def validate(document: Any, schema_name: str, source: str | Path) -> Any:
    """Validate and return `document`; raise InvalidDocument naming `source` on the first error."""
    error = first_error(document, schema_validator(schema_name))
    if error:
        raise InvalidDocument(f"{source}: {error} [{_file(schema_name)}]")
    return document
