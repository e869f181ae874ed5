"""What the simulated agent can know: only the Messages API request the CLI sent.

Every decision of the simulated agent is a pure function of the request and its session's noise draws,
which is what makes it deterministic and lets several sessions share one server. The server's only
per-session state (what the session wrote to the prompt cache, how often a request was refused as
overloaded) shapes usage and faults, never what the agent does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_SKILL_BASE = re.compile(r"^Base directory for this skill: (?P<dir>\S+)\n\n", re.S)
_CWD = re.compile(r"Primary working directory: (\S+)")
_SKILL_IN_PROMPT = re.compile(r"\b[Uu]se the ([a-z0-9][a-z0-9._-]*) skill\b")
# The CLI lists every skill it found (the project's and its own bundled ones) in a reminder of the first message,
# one "- <name>: <description>" entry each; a description may run over several lines.
_LISTING = "The following skills are available for use with the Skill tool:"
_ENTRY = re.compile(r"^- (\S+): ?(.*)$")


@dataclass(frozen=True)
class ToolResult:
    tool_use_id: str
    text: str
    is_error: bool


@dataclass(frozen=True)
class Conversation:
    prompt: str
    cwd: str
    turns: int  # assistant messages so far
    skills: dict[str, str] = field(default_factory=dict)  # skill name -> loaded skill text
    listed: dict[str, str] = field(default_factory=dict)  # skill name -> description, as the CLI listed them
    skill_dirs: dict[str, str] = field(default_factory=dict)  # skill name -> its base directory, as the CLI said
    results: tuple[ToolResult, ...] = ()

    @property
    def requested_skill(self) -> str | None:
        m = _SKILL_IN_PROMPT.search(self.prompt)
        return m.group(1) if m else None

    @property
    def skill_text(self) -> str:
        return "\n".join(self.skills[k] for k in sorted(self.skills))


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")


def _listing(text: str) -> dict[str, str]:
    """The skills a reminder lists, name -> description (continuation lines joined with a space)."""
    listed: dict[str, str] = {}
    name = None
    for line in text.split(_LISTING, 1)[1].split("</system-reminder>", 1)[0].splitlines():
        m = _ENTRY.match(line)
        if m:
            name = m.group(1)
            listed[name] = m.group(2).strip()
        elif name is not None and line.strip():
            listed[name] = f"{listed[name]} {line.strip()}"
    return listed


def parse(body: dict[str, Any]) -> Conversation:
    messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
    prompt, cwd, listed = "", "/", {}
    if messages:
        for block in _blocks(messages[0]):
            text = block.get("text", "") if block.get("type") == "text" else ""
            m = _CWD.search(text)
            if m:
                cwd = m.group(1)
            if _LISTING in text:  # behind a gateway, in the same note as the working directory
                listed = _listing(text)
            if not m and _LISTING not in text and text and not prompt and not text.lstrip().startswith(
                    "<system-reminder>"):
                prompt = text  # the first: a gateway appends the CLI's mid-conversation system notes as user text
    skills: dict[str, str] = {}
    skill_dirs: dict[str, str] = {}
    results: list[ToolResult] = []
    turns = 0
    for message in messages:
        if message.get("role") == "assistant":
            turns += 1
            continue
        for block in _blocks(message):
            if block.get("type") == "tool_result":
                results.append(ToolResult(str(block.get("tool_use_id")), _text_of(block.get("content")),
                                          bool(block.get("is_error"))))
            elif block.get("type") == "text":
                m = _SKILL_BASE.match(block.get("text", ""))
                if m:
                    name = m.group("dir").rstrip("/").rsplit("/", 1)[-1]
                    skills[name], skill_dirs[name] = block["text"][m.end():], m.group("dir").rstrip("/")
    return Conversation(prompt=prompt.strip(), cwd=cwd, turns=turns, skills=skills, listed=listed,
                        skill_dirs=skill_dirs, results=tuple(results))
