"""Parse the YAML and JSON files that cross a stage boundary, with caps an adversary cannot talk past.

YAML anchors let a few hundred bytes stand for billions of nodes (a nine-level "billion laughs" tasks.yaml
once took 110 s and 3 GB before it was refused), so a document is refused when it is too large, nests too
deep, uses too many aliases, or would expand to too many nodes. JSON refuses NaN and Infinity, which no file
of this pipeline may hold. Every refusal names the file, the line where there is one, and the rule.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, AnyStr

import yaml

from skillevo.files import safefs
from skillevo.files.errors import BadInput

MAX_YAML_BYTES = 4 << 20
MAX_JSON_BYTES = 64 << 20
MAX_ALIASES = 64
MAX_DEPTH = 48
MAX_NODES = 200_000


class _CappedLoader(yaml.SafeLoader):
    """SafeLoader that counts aliases and nesting while composing, before any expansion can happen."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: ANN401 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]  # PyYAML's stubs
                raise yaml.YAMLError(f"line {mark.line + 1}: more than {MAX_ALIASES} aliases (rule: alias cap)")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]  # PyYAML's stubs
                raise yaml.YAMLError(f"line {mark.line + 1}: nested deeper than {MAX_DEPTH} (rule: nesting cap)")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _count_nodes(value: Any, source: str) -> None:
    """Refuse a value whose expanded form (aliases counted every time they are used) is too large."""
    budget = MAX_NODES
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise BadInput(f"{source}: expands to more than {MAX_NODES} nodes (rule: expansion cap)")
        if depth > MAX_DEPTH:
            raise BadInput(f"{source}: nested deeper than {MAX_DEPTH} (rule: nesting cap)")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
            budget -= len(node)
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def parse_yaml(text: str, source: str) -> Any:
    """One YAML document, capped; BadInput names the source, the line and the rule."""
    loader = _CappedLoader(text)
    try:
        value = loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        raise BadInput(f"{where}: not valid YAML: {e.problem or e.context} (rule: YAML syntax)") from None
    except yaml.YAMLError as e:
        raise BadInput(f"{source}: {e}") from None
    except RecursionError:
        raise BadInput(f"{source}: nested too deep to parse (rule: nesting cap)") from None
    finally:
        loader.dispose()
    _count_nodes(value, source)
    return value


def load_yaml(path: str | Path, *, what: str, max_bytes: int = MAX_YAML_BYTES) -> Any:
    text = safefs.read_text(path, max_bytes=max_bytes, what=what)
    return parse_yaml(text, str(path))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def parse_json(text: str | bytes, source: str) -> Any:
    """Strict JSON: no NaN or Infinity; BadInput names the source and where the parse failed."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise BadInput(f"{source}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg} (rule: JSON syntax)") \
            from None
    except (ValueError, RecursionError) as e:
        raise BadInput(f"{source}: not valid JSON: {e} (rule: JSON syntax)") from None


def load_json(path: str | Path, *, what: str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    text = safefs.read_text(path, max_bytes=max_bytes, what=what)
    return parse_json(text, str(path))


def jsonl_lines(text: AnyStr) -> list[AnyStr]:
    """The lines of a JSONL file or stream, text or bytes. Only "\\n" ends a line, never splitlines()' other
    breaks: JSON strings may hold U+2028, U+2029 and U+0085 unescaped (JSON.stringify writes them raw), so an agent
    could otherwise cut one line in two."""
    lines = text.split(b"\n" if isinstance(text, bytes) else "\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def dump_json(value: Any) -> bytes:
    """The project's one JSON file form: sorted keys, indent 1, UTF-8, no NaN, trailing newline."""
    return (json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode()
