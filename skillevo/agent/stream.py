"""Strict parsing of the CLI's stream-json output into measured facts.

Anything unexpected is an error, never a default: a stream that cannot be read whole is never taken as the CLI's
account (the session then keeps what the relay counted, skillevo.agent.session). Lines end at "\n" only, the
rule of skillevo.files.documents.jsonl_lines. Cost that the CLI did not report stays None ("unmeasured"), never 0.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from skillevo.core.events import STOPPED, USAGE_FIELDS
from skillevo.files import documents
from skillevo.files.errors import BadInput

SYNTHETIC_MODEL = "<synthetic>"  # messages the CLI writes itself (API errors, interruptions): no model served them
_TOOL_ID = re.compile(r"^[A-Za-z0-9._:-]{1,256}$")


class StreamError(BadInput):
    """The stream is not a well-formed record of one session."""


@dataclass
class Parsed:
    events: list[dict[str, Any]]
    result: dict[str, Any]
    usage: dict[str, int]
    cost_usd: float | None
    num_turns: int
    duration_s: float
    session_id: str
    tool_uses: dict[str, int] = field(default_factory=dict)
    skill_calls: list[tuple[str, str]] = field(default_factory=list)  # (tool id, skill name)
    tool_results: dict[str, bool] = field(default_factory=dict)  # tool id -> succeeded
    served_models: list[str] = field(default_factory=list)  # what the API said it served, sorted

    @property
    def succeeded(self) -> bool:
        return self.result.get("subtype") == "success" and self.result.get("is_error") is False

    def skill_invoked(self, skill: str) -> bool:
        """A Skill call for `skill` followed by a successful result for the same tool id."""
        return skill in self.skills_loaded

    @property
    def skills_loaded(self) -> list[str]:
        """Every skill a Skill call loaded (a successful result for its tool id), in order, once each."""
        return list(dict.fromkeys(name for tid, name in self.skill_calls if self.tool_results.get(tid) is True))


def _reject_constant(name: str) -> float:
    raise StreamError(f"non-finite number {name} in stream")


def _skill_name(tool_input: Any) -> str:
    raw = ""
    if isinstance(tool_input, dict):
        raw = next((str(tool_input[k]) for k in ("skill", "command", "name") if isinstance(tool_input.get(k), str)), "")
    token = raw.strip().split(maxsplit=1)[0] if raw.strip() else ""
    return token.lstrip("/").rsplit(":", 1)[-1]


def _cost(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _event(line: str) -> Any:
    """One stream line as JSON; StreamError for anything else, a line nested too deep to parse included."""
    try:
        return json.loads(line, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise StreamError(f"is not JSON: {e.msg}") from None
    except RecursionError:
        raise StreamError("is nested too deep to parse") from None


def partial(stdout: bytes) -> list[dict[str, Any]]:
    """The well-formed events of a stream the harness could not take whole (stopped, cut, refused): every line that
    is a JSON object with a type, in order. The cut last line, anything else, and any `result` or stopped event are
    dropped: the harness's stopped event is then the session's one account (results.transcript_totals)."""
    events = []
    for line in documents.jsonl_lines(stdout.decode("utf-8", errors="replace")):
        try:
            event = _event(line)
        except StreamError:
            continue
        if isinstance(event, dict) and isinstance(event.get("type"), str) and event["type"] not in ("result", STOPPED):
            events.append(event)
    return events


def parse(stdout: bytes) -> Parsed:
    try:
        text = stdout.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StreamError(f"stream is not UTF-8 at byte {e.start}") from None
    events: list[dict[str, Any]] = []
    for n, line in enumerate(documents.jsonl_lines(text), 1):
        if not line.strip():
            continue
        try:
            event = _event(line)
        except StreamError as e:
            raise StreamError(f"line {n} {e}") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise StreamError(f"line {n} is not a JSON object with a type")
        events.append(event)
    results = [i for i, e in enumerate(events) if e["type"] == "result"]
    if len(results) != 1:
        raise StreamError(f"expected exactly one result event, found {len(results)}")
    after = [e["type"] for e in events[results[0] + 1:] if e["type"] != "system"]
    if after:
        raise StreamError(f"events after the result: {', '.join(after)}")
    result = events[results[0]]
    usage = result.get("usage")
    if not isinstance(usage, dict):
        raise StreamError("result has no usage object")
    missing = [f for f in USAGE_FIELDS
               if isinstance(usage.get(f), bool) or not isinstance(usage.get(f), int) or usage[f] < 0]
    if missing:
        raise StreamError(f"result usage lacks {', '.join(missing)}")
    session_id = result.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        raise StreamError("result has no session_id")
    turns, duration = result.get("num_turns"), result.get("duration_ms")
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 0:
        raise StreamError("result num_turns is not a non-negative integer")
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or duration < 0:
        raise StreamError("result duration_ms is not a non-negative number")

    parsed = Parsed(events=events, result=result, usage={f: usage[f] for f in USAGE_FIELDS},
                    cost_usd=_cost(result.get("total_cost_usd")), num_turns=turns, duration_s=round(duration / 1000, 3),
                    session_id=session_id)
    tools: Counter[str] = Counter()
    seen_ids: set[str] = set()
    served: set[str] = set()
    for event in events[: results[0]]:
        message = event.get("message") if event["type"] in ("assistant", "user") else None
        if event["type"] == "assistant" and isinstance(message, dict):
            model = message.get("model")
            if isinstance(model, str) and 0 < len(model) <= 256 and model != SYNTHETIC_MODEL:
                served.add(model)
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if event["type"] == "assistant" and block.get("type") == "tool_use":
                tid, name = block.get("id"), block.get("name")
                if not isinstance(tid, str) or not _TOOL_ID.match(tid) or tid in seen_ids or not isinstance(name, str):
                    raise StreamError(f"malformed or duplicate tool_use id {tid!r}")
                seen_ids.add(tid)
                tools[name] += 1
                if name.lower() == "skill":
                    parsed.skill_calls.append((tid, _skill_name(block.get("input"))))
            elif event["type"] == "user" and block.get("type") == "tool_result":
                tid = block.get("tool_use_id")
                if tid in seen_ids:  # a result may only follow its call
                    parsed.tool_results[tid] = parsed.tool_results.get(tid, False) or not block.get("is_error", False)
    parsed.tool_uses = dict(sorted(tools.items()))
    parsed.served_models = sorted(served)
    return parsed
