"""Load the project's JSON Schemas and validate untrusted documents against them.

Schemas refer to each other by file name (`params.schema.json#/$defs/gate`), so a shape such as the gate
policy or a task binding is defined once and used wherever it appears. Errors name the file, the JSON path
and the rule, so a user can fix a bad input without reading code. The first error is chosen by path, so the
same bad document gives the same message on every run.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillevo.files.errors import BadInput, one_line

if TYPE_CHECKING:  # jsonschema is imported where a document is validated: a process that only reads a schema's
    import jsonschema  # definitions (the identity stage, on every repro) never pays for it
    from referencing import Registry

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"
BASE_URI = "https://skillevo.invalid/schemas/"
_MAX_MESSAGE = 300  # jsonschema quotes whole instances; a refusal should stay one readable line


class InvalidDocument(BadInput):
    """An input failed its schema; the message says which file, where and why."""


def _file(name: str) -> str:
    return name if name.endswith(".json") else f"{name}.schema.json"


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """`schemas/<name>.schema.json` (or `schemas/<name>` when it ends in .json). Every schema is checked against
    2020-12 before the first document is validated (_registry holds them all, each through checked_schema)."""
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / _file(name)).read_text(encoding="utf-8"))
    if schema.get("$id") != BASE_URI + _file(name):
        raise RuntimeError(f"schemas/{_file(name)}: $id must be {BASE_URI + _file(name)}")
    return schema


@functools.cache
def checked_schema(name: str) -> dict[str, Any]:
    """load_schema, the schema itself checked against 2020-12 once."""
    import jsonschema

    schema = load_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


@functools.cache
def _registry() -> Registry:
    from referencing import Registry, Resource

    resources = [(BASE_URI + p.name, Resource.from_contents(checked_schema(p.name)))
                 for p in sorted(SCHEMA_DIR.glob("*.schema.json"))]
    return Registry().with_resources(resources)


@functools.cache
def schema_validator(name: str, definition: str | None = None) -> jsonschema.Draft202012Validator:
    """A named schema, or one of its `$defs` on its own."""
    import jsonschema

    schema = checked_schema(name)
    if definition is not None:
        if definition not in schema.get("$defs", {}):
            raise KeyError(f"schemas/{_file(name)} has no $defs/{definition}")
        schema = {"$ref": f"{BASE_URI}{_file(name)}#/$defs/{definition}"}
    return jsonschema.Draft202012Validator(schema, registry=_registry(), format_checker=jsonschema.FormatChecker())


_MISSING = object()


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        found: dict[str, Any] = root["$defs"][ref.removeprefix("#/$defs/")]
        return found
    return node


def fill_defaults(value: Any, schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """A copy of `value` with every missing object property that has a schema `default` filled in, recursively
    (also through array items): a schema is the one place a default is written."""
    root = root or schema
    schema = _resolve(schema, root)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [fill_defaults(v, schema["items"], root) for v in value]
    if not isinstance(value, dict):
        return value
    out = dict(value)
    properties = schema.get("properties", {})
    for name, sub in properties.items():
        default = sub.get("default", _resolve(sub, root).get("default", _MISSING))
        if name not in out and default is not _MISSING:
            out[name] = copy.deepcopy(default)
        if name in out:
            out[name] = fill_defaults(out[name], sub, root)
    other = schema.get("additionalProperties")
    if isinstance(other, dict):  # a mapping of named entries (params arms): each entry gets its defaults
        for name in out.keys() - properties.keys():
            out[name] = fill_defaults(out[name], other, root)
    return out


def json_path(parts: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def first_error(document: Any, validator: jsonschema.Draft202012Validator) -> str | None:
    """The first violation by JSON path, as '$.path: message (rule: keyword)', or None when valid."""
    errors = sorted(
        validator.iter_errors(document),
        key=lambda e: ([(0, p) if isinstance(p, int) else (1, str(p)) for p in e.absolute_path], e.validator),
    )
    if not errors:
        return None
    e = errors[0]
    description = e.schema.get("description") if isinstance(e.schema, dict) else None
    allowed = _allowed_values(e) if e.validator in ("anyOf", "oneOf") else None
    rule = e.validator
    if e.validator == "pattern" and description:  # a regex tells a user nothing; the rule's words do
        message = one_line(f"{e.instance!r} is not {description}")
    elif allowed is not None:  # a choice spread over several enums still reads as one list of values
        message, rule = f"{e.instance!r} is not one of {allowed!r}", "enum"
    else:
        message = one_line(e.message)
    message = message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 3] + "..."
    return f"{json_path(e.absolute_path)}: {message} (rule: {rule})"


def _allowed_values(error: jsonschema.ValidationError) -> list[Any] | None:
    """The literal values an anyOf/oneOf of enums, consts and `type: null` allows; None if it is more than that."""
    values: list[Any] = []
    for sub in error.context or ():
        if sub.validator == "enum" and isinstance(sub.validator_value, list):  # a checked schema's enum is a list
            values += sub.validator_value
        elif sub.validator == "const":
            values.append(sub.validator_value)
        elif sub.validator == "type" and sub.validator_value == "null":
            values.append(None)
        elif sub.validator in ("anyOf", "oneOf"):
            nested = _allowed_values(sub)
            if nested is None:
                return None
            values += nested
        else:
            return None
    return values or None


def validate(document: Any, schema_name: str, source: str | Path, definition: str | None = None) -> Any:
    """Validate and return `document`; raise InvalidDocument naming `source` on the first error."""
    error = first_error(document, schema_validator(schema_name, definition))
    if error:
        where = _file(schema_name) + (f"#/$defs/{definition}" if definition else "")
        raise InvalidDocument(f"{source}: {error} [{where}]")
    return document
