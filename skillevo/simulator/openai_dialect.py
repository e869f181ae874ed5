"""The simulator in OpenAI's Chat Completions dialect: what a gateway (the LiteLLM proxy of the openai and litellm
backends) sends upstream, read back into the Messages API request the simulated agent reasons about, and its reply
written as OpenAI writes one (plain or streamed chunks, usage with cached tokens).

The translation is the inverse of the gateway's, so the agent sees the same conversation either way: system
messages are the system prompt; consecutive user and tool messages are one user turn (a tool message is a
tool_result block, with the id of the call it answers); an assistant message's tool calls are tool_use blocks.
Prompt caching: OpenAI caches a prompt's prefix automatically, reports cached input tokens and never charges for
writes; so every request gets breakpoints after its system prompt and at its end, and the simulator's cache split
(cache.py) reaches the gateway as `prompt_tokens_details.cached_tokens`, the writes as plain input.
"""

from __future__ import annotations

import json
from typing import Any

PATH = "/v1/chat/completions"


def _parts(content: Any) -> list[dict[str, Any]]:
    """An OpenAI content (a string or a list of parts) as Messages text blocks; a part's cache_control is kept."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for part in content or []:
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            block = {"type": "text", "text": part["text"]}
            if isinstance(part.get("cache_control"), dict):
                block["cache_control"] = part["cache_control"]
            blocks.append(block)
    return blocks


def _text(content: Any) -> str:
    return "\n".join(b["text"] for b in _parts(content))


def to_messages(body: dict[str, Any]) -> dict[str, Any]:
    """The Messages API request a Chat Completions request stands for."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []

    def user_turn() -> list[dict[str, Any]]:
        if not messages or messages[-1]["role"] != "user":
            messages.append({"role": "user", "content": []})
        return messages[-1]["content"]

    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role in ("system", "developer"):
            system += _parts(m.get("content"))
        elif role == "user":
            user_turn().extend(_parts(m.get("content")))
        elif role == "tool":
            user_turn().append({"type": "tool_result", "tool_use_id": str(m.get("tool_call_id")),
                                "content": _text(m.get("content"))})
        elif role == "assistant":
            blocks = _parts(m.get("content"))
            for call in m.get("tool_calls") or []:
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except json.JSONDecodeError:
                    arguments = {}
                blocks.append({"type": "tool_use", "id": str(call.get("id")), "name": str(function.get("name")),
                               "input": arguments})
            messages.append({"role": "assistant", "content": blocks})
    tools = [{"name": t["function"].get("name"), "input_schema": t["function"].get("parameters") or {}}
             for t in body.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    _automatic_cache(system, messages)
    return {"model": body.get("model"), "system": system, "tools": tools, "messages": messages,
            "stream": bool(body.get("stream"))}


def _automatic_cache(system: list[dict[str, Any]], messages: list[dict[str, Any]]) -> None:
    """OpenAI caches a prompt's prefix without being asked: a breakpoint after the system prompt and at the end of
    the request lets the simulator's cache (cache.py) find what an earlier request of the session wrote."""
    for blocks in (system, messages[-1]["content"] if messages else []):
        if blocks and "cache_control" not in blocks[-1]:
            blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}


def _usage(usage: dict[str, int]) -> dict[str, Any]:
    cached = usage.get("cache_read_input_tokens", 0)
    prompt = usage.get("input_tokens", 0) + usage.get("cache_creation_input_tokens", 0) + cached
    completion = usage.get("output_tokens", 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
            for b in message["content"] if b["type"] == "tool_use"]


def completion(message: dict[str, Any]) -> dict[str, Any]:
    """A Messages reply (server._message) as a chat.completion."""
    text = "".join(b["text"] for b in message["content"] if b["type"] == "text")
    calls = _calls(message)
    answer: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        answer["tool_calls"] = calls
    return {"id": message["id"].replace("msg_", "chatcmpl-", 1), "object": "chat.completion", "created": 0,
            "model": message["model"],
            "choices": [{"index": 0, "message": answer, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": _usage(message["usage"])}


def chunks(message: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The same reply as the chunks of a stream: the text, each call whole, the finish, then usage if asked for."""
    head = {"id": message["id"].replace("msg_", "chatcmpl-", 1), "object": "chat.completion.chunk", "created": 0,
            "model": message["model"]}
    text = "".join(b["text"] for b in message["content"] if b["type"] == "text")
    calls = _calls(message)
    out = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]}]
    for i, call in enumerate(calls):
        out.append({**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, **call}]},
                                         "finish_reason": None}]})
    out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]})
    if include_usage:
        out.append({**head, "choices": [], "usage": _usage(message["usage"])})
    return out


def error(status: int, message: str) -> dict[str, Any]:
    kind = {401: "invalid_api_key", 429: "rate_limit_exceeded", 529: "overloaded"}.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "code": kind}}
