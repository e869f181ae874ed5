"""SKILL.md frontmatter: the rules a skill's YAML header must pass, and what a candidate may change in it.

The header is what the model sees before it decides to use a skill (name and description reach it in the
Skill tool's listing), and some keys change what the agent may do or which model runs. A candidate that
damages the first or widens the second must never be frozen, benchmarked as if nothing happened, or
applied. Sources (docs/formats.md cites them): the Agent Skills specification (agentskills.io,
docs/specification.mdx: name, description, license, compatibility, metadata, allowed-tools), Anthropic's
Agent Skills overview (name and description may not contain XML tags; name may not contain the reserved
words "anthropic" or "claude") and Claude Code's skills reference for the keys it adds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, overload

from skillevo.files import documents
from skillevo.files.errors import BadInput
from skillevo.files.schemas import load_schema

_SKILL_NAME = load_schema("common")["$defs"]["skill_name"]  # one definition: params refuse what this refuses
MAX_NAME = _SKILL_NAME["maxLength"]
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
MAX_HEADER_BYTES = 16 << 10
NAME = re.compile(_SKILL_NAME["pattern"])  # lowercase letters, digits, single inner hyphens
RESERVED = tuple(_SKILL_NAME["not"]["pattern"].split("|"))
TAG = re.compile(r"<\s*/?\s*[A-Za-z!?][^<>]*>")  # an XML/HTML tag, comment or declaration

SPEC_KEYS = frozenset({"name", "description", "license", "compatibility", "metadata", "allowed-tools"})
CLAUDE_CODE_KEYS = frozenset({
    "when_to_use", "argument-hint", "arguments", "disable-model-invocation", "user-invocable", "allowed-tools",
    "disallowed-tools", "model", "effort", "context", "agent", "hooks", "paths", "shell",
})
KNOWN_KEYS = SPEC_KEYS | CLAUDE_CODE_KEYS
# keys that widen what the agent may do, run commands, or choose which model (and how hard) runs the skill
PRIVILEGED = frozenset({"allowed-tools", "disallowed-tools", "hooks", "shell", "model", "effort", "context", "agent"})


@dataclass(frozen=True)
class Header:
    fields: dict[str, Any]
    raw: str  # the YAML text between the fences


def _refuse(where: str, rule: str) -> BadInput:
    return BadInput(f"{where}: {rule}")


def parse(text: str, where: str) -> Header:
    """The YAML mapping between a leading `---` line and the next `---` line."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r") != "---":
        raise _refuse(where, "does not start with a `---` line opening the YAML frontmatter (rule: frontmatter "
                             "required)")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip("\r") in ("---", "...")), None)
    if end is None:
        raise _refuse(where, "the frontmatter opened on line 1 is never closed by a `---` line (rule: frontmatter "
                             "required)")
    raw = "\n".join(lines[1:end])
    if len(raw.encode()) > MAX_HEADER_BYTES:
        raise _refuse(where, f"frontmatter over {MAX_HEADER_BYTES} bytes (rule: frontmatter size)")
    # one leading empty line stands for the opening fence, so YAML's line numbers are the file's
    fields = documents.parse_yaml("\n" + raw, where) if raw.strip() else None
    if not isinstance(fields, dict):
        raise _refuse(where, "frontmatter must be a YAML mapping with at least name and description (rule: "
                             "frontmatter required)")
    return Header(fields, raw)


@overload
def _text(fields: Mapping[str, Any], key: str, where: str, limit: int, *, required: Literal[True]) -> str: ...
@overload
def _text(fields: Mapping[str, Any], key: str, where: str, limit: int, *, required: Literal[False]) -> str | None: ...
def _text(fields: Mapping[str, Any], key: str, where: str, limit: int, *, required: bool) -> str | None:
    value = fields.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _refuse(where, f"`{key}` must be a non-empty string (rule: frontmatter {key})")
    if len(value) > limit:
        raise _refuse(where, f"`{key}` is {len(value)} characters, over {limit} (rule: frontmatter {key} length)")
    if tag := TAG.search(value):
        raise _refuse(where, f"`{key}` contains markup ({tag.group(0)!r}); it reaches the model as "
                             f"plain text (rule: frontmatter {key} has no XML/HTML tags)")
    return value


def check(skill: str, data: bytes | str, where: str, extra_keys: frozenset[str] = frozenset()) -> Header:
    """One skill's SKILL.md header, held to the specification; `skill` is its directory name."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    header = parse(text, where)
    fields = header.fields
    unknown = sorted(str(k) for k in fields if k not in KNOWN_KEYS | extra_keys)
    if unknown:
        raise _refuse(where, f"unknown frontmatter key(s) {unknown}; known: the Agent Skills specification's and "
                             "Claude Code's keys, plus params skills.frontmatter_keys (rule: known keys)")
    name = _text(fields, "name", where, MAX_NAME, required=True)
    if not NAME.fullmatch(name):
        raise _refuse(where, f"`name` {name!r} must be lowercase letters, digits and single hyphens, not starting "
                             "or ending with one (rule: frontmatter name)")
    for word in RESERVED:
        if word in name:
            raise _refuse(where, f"`name` {name!r} contains the reserved word {word!r} (rule: frontmatter name)")
    if name != skill:
        raise _refuse(where, f"`name` {name!r} is not the skill's directory name {skill!r} (rule: name matches "
                             "directory)")
    _text(fields, "description", where, MAX_DESCRIPTION, required=True)
    _text(fields, "compatibility", where, MAX_COMPATIBILITY, required=False)
    metadata = fields.get("metadata")
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise _refuse(where, "`metadata` must map strings to strings (rule: frontmatter metadata)")
    return header


def check_family(files: Mapping[str, bytes], root: str, skill_file: str,
                 extra_keys: frozenset[str] = frozenset()) -> dict[str, Header]:
    """Every skill's header in a family (`<skill>/<path>` -> bytes); names are unique because each equals its
    directory's."""
    return {rel.split("/")[0]: check(rel.split("/")[0], data, f"{root}/{rel}", extra_keys)
            for rel, data in sorted(files.items()) if rel.count("/") == 1 and rel.endswith("/" + skill_file)}


def changes(before: Mapping[str, Header], after: Mapping[str, Header]) -> list[str]:
    """Every key a candidate adds, removes or changes, one readable line each (proposal.md, the gate report)."""
    out = []
    for skill in sorted(set(before) | set(after)):
        old = before[skill].fields if skill in before else {}
        new = after[skill].fields if skill in after else {}
        for key in sorted(set(old) | set(new), key=str):
            if key not in new:
                out.append(f"{skill}: removed `{key}`")
            elif key not in old:
                out.append(f"{skill}: added `{key}`: {_show(new[key])}")
            elif old[key] != new[key]:
                out.append(f"{skill}: changed `{key}`: {_show(old[key])} -> {_show(new[key])}")
    return out


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


def check_privileged(before: Mapping[str, Header], after: Mapping[str, Header], where: str, allowed: bool) -> None:
    """A candidate may not add, change or remove a privileged key unless params propose.allow says so."""
    if allowed:
        return
    for skill in sorted(after):
        old = before[skill].fields if skill in before else {}
        new = after[skill].fields
        touched = sorted(k for k in PRIVILEGED if old.get(k) != new.get(k))
        if touched:
            raise _refuse(f"{where}/{skill}", f"changes privileged frontmatter key(s) {touched}, which widen what the "
                                              "agent may do or choose the model; not allowed unless params "
                                              "propose.allow lists privileged-frontmatter (rule: privileged keys)")
