"""Load the project's JSON Schemas and validate untrusted documents against them.

Errors name the file, the JSON path and the rule, so a user can fix a bad input without reading code.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"


class InvalidDocument(ValueError):
    """An input failed its schema; the message says which file, where and why."""


@functools.cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def _where(error: jsonschema.ValidationError) -> str:
    parts = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return "$" + parts


def validate(document: Any, schema_name: str, source: str | Path) -> Any:
    """Validate and return `document`; raise InvalidDocument naming `source` on the first error."""
    errors = sorted(_validator(schema_name).iter_errors(document), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        raise InvalidDocument(f"{source}: {_where(e)}: {e.message} (rule: {schema_name} {e.validator})")
    return document
