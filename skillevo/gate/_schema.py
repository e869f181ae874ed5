"""The gate's input errors, and schema views of the fields it reads from other stages' files."""

from __future__ import annotations

from typing import Any

import jsonschema

from skillevo.schemas import first_error, json_path, load_schema, schema_validator

__all__ = ["GateInputError", "first_error", "json_path", "schema_validator", "view_validator"]


class GateInputError(ValueError):
    """Bad gate input (results, bench.json, freeze manifest, params): the stage exits non-zero on it."""


def view_validator(view: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """A schema for the fields the gate reads from another stage's file, reusing promotion.json's `$defs`.

    Views leave other fields alone: the writing stage's own schema owns the rest of its file.
    """
    return jsonschema.Draft202012Validator({"$defs": load_schema("promotion")["$defs"], **view})
