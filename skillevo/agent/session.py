"""One headless Claude Code session inside a bubblewrap sandbox, turned into a verified record.

    record = run_session(SessionSpec(...))

The record is the only thing callers get: measured facts from the stream (cost, tokens, turns, skill
evidence) and the sha256 of the redacted transcript stored beside it. It never holds a credential.

A session that ran always leaves a transcript with one account of what it cost: the CLI's result event, or, when
the CLI gave none the harness can read, the tokens the relay counted. Its failure is the API's (`session-error`,
excluded) only when the relay saw the endpoint fail; anything else, the agent may have caused, so it is measured.
"""

from __future__ import annotations

import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillevo import sandbox
from skillevo.agent import cli, stream, transcript
from skillevo.core import arms, events, models
from skillevo.core.redact import redact_text
from skillevo.sandbox import Mount, SandboxSpec

RELAY_PORT = 8787  # inside the sandbox's private network namespace, so it never collides
DEFAULT_TOOLS = ("Skill", "Read", "Edit", "Write", "Bash", "Glob", "Grep")
MAX_TRANSCRIPT_BYTES = 8 << 20
TAIL = 2000
STALL_S = 120.0  # a request the endpoint left unanswered this long makes a timeout the API's fault


@dataclass(frozen=True)
class SessionSpec:
    prompt: str
    workspace: Path
    model: str
    endpoint: str  # model base URL: the simulator's, https://api.anthropic.com, or any compatible endpoint
    transcript_dir: Path
    transcript_name: str
    credential: models.Credential | None = None  # the real key or token; it stays on the host side of the relay
    headers: tuple[tuple[str, str], ...] = ()  # the relay's own headers (skillevo.backends.Endpoint)
    prices: models.Prices | None = None  # a gateway backend's prices: the session's cost is its usage at them
    mcp: tuple[arms.McpServer, ...] = ()  # the arm's MCP servers (their frozen files among `mounts`)
    expected_skill: str | None = None  # a skill name, arms.AUTO or arms.NONE (an arm's session); None: no check
    # workspace-relative, over-mounted read-only: skills and project settings
    readonly_paths: tuple[str, ...] = (".claude",)
    mounts: tuple[Mount, ...] = ()
    tools: tuple[str, ...] = DEFAULT_TOOLS
    timeout_s: float = 1800.0
    max_turns: int | None = None
    max_budget_usd: float | None = None  # what is left of the cell's per-run cost cap (docs/gate.md, the cap)
    max_retries: int = 2
    effort: str | None = None
    cancel: threading.Event | None = None
    limits: sandbox.Limits | None = None  # the cell's limits; None for the proposer
    after_agent: bool = False  # an earlier session's agent ran in this workspace (a later session of a cell)


def _env(spec: SessionSpec) -> dict[str, str]:
    env = sandbox.base_env()
    env.update({
        "CLAUDE_CONFIG_DIR": f"{sandbox.HOME}/.claude",
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{RELAY_PORT}",
        "ANTHROPIC_API_KEY": sandbox.PLACEHOLDER_KEY,  # for a real key or token alike: the relay replaces it
        "SKILLEVO_RELAY_PORT": str(RELAY_PORT),
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": str(spec.max_retries),
        "API_TIMEOUT_MS": str(int(spec.timeout_s * 1000)),
    })
    return env


def _failure(kind: str, detail: str, base: dict[str, Any]) -> dict[str, Any]:
    return {**base, "ok": False, "error_kind": kind, "error_detail": detail[-TAIL:]}


def _stopped(spec: SessionSpec, record: dict[str, Any], finished: sandbox.Finished, usage: dict[str, int],
             served: list[str], kind: str, detail: str, secrets: tuple[str, ...]) -> dict[str, Any]:
    """A session the CLI could not give a readable account of (stopped, cut, flooded, refused by the parser): the
    events it did print, and a last `skillevo_stopped` event with the tokens the relay counted and their cost at the
    pinned CLI's prices, stored as its transcript (the gate recomputes the row from it, as from a result event)."""
    printed = stream.partial(finished.stdout)
    session_id = next((e["session_id"] for e in printed if isinstance(e.get("session_id"), str) and e["session_id"]),
                      f"stopped-{uuid.uuid4().hex}")
    cost = models.price(usage, served[0] if len(served) == 1 else spec.model, spec.prices)
    turns = sum(1 for e in printed if e["type"] == "assistant")
    detail = redact_text(detail, secrets)
    stop = {"type": events.STOPPED, "subtype": kind, "reason": detail, "session_id": session_id, "usage": usage,
            "num_turns": turns, "duration_ms": round(finished.wall_s * 1000), "total_cost_usd": cost}
    record.update(cost_usd=cost, **usage, num_turns=turns, duration_s=round(round(finished.wall_s * 1000) / 1000, 3),
                  session_id=session_id, served_models=served)
    try:
        data = transcript.render([*printed, stop], secrets)
    except RecursionError:  # an event nested too deep to redact: the harness's account alone
        data = transcript.render([stop], secrets)
    try:
        record["transcript"] = transcript.write(data, spec.transcript_dir, f"{spec.transcript_name}-{session_id}.jsonl")
    except OSError as e:
        return _failure("evidence-unverified", f"{detail}; could not store the transcript: {e}", record)
    return _failure(kind, detail, record)


def _cli_budget(spec: SessionSpec) -> float | None:
    """The cap the CLI may enforce itself: only in its own dollars. Behind a gateway the CLI prices a model it does
    not know by guesswork (models.session_cost), so it would stop sessions at a figure unrelated to the cap; there
    the cell applies the cap to the session's priced cost after it ends (bench.cell), a cost-cap row as here."""
    return spec.max_budget_usd if spec.prices is None else None


def blame(state: str, api_failed: str | None, stalled_s: float, timeout_s: float) -> str | None:
    """Why the API is to blame for how a session ended, or None. A timeout is the API's only when a request of the
    CLI's had waited for the endpoint a long time: a failed answer before it says nothing of why the session then
    ran out of time (an agent can provoke an error and then wait), so that timeout is a measured cell-limit."""
    if state != "timeout":
        return api_failed
    if stalled_s >= min(STALL_S, timeout_s / 2):
        return f"the model endpoint had not answered for {stalled_s:.0f}s (the API stalled)"
    return None


def run_session(spec: SessionSpec) -> dict[str, Any]:
    """Run one session; return its record (see schemas/session-record.schema.json)."""
    binary = cli.locate()
    secrets = (spec.credential.secret,) if spec.credential else ()
    record: dict[str, Any] = {
        "ok": False, "error_kind": None, "error_detail": None, "model": spec.model, "served_models": [],
        "cost_usd": None, **{f: 0 for f in stream.USAGE_FIELDS}, "num_turns": 0, "duration_s": 0.0, "wall_s": 0.0,
        "session_id": None, "tool_uses": {}, "expected_skill": spec.expected_skill, "skill_invoked": None,
        "skills_loaded": [],
        "transcript": None, "process_state": None, "returncode": None, "stderr_tail": "",
    }
    with tempfile.TemporaryDirectory(prefix="skillevo-session-") as tmp:
        private = Path(tmp)
        mounts = [Mount(binary, cli.CLI_DST)]
        mounts += [Mount(spec.workspace / rel, f"{sandbox.WORKDIR}/{rel}") for rel in spec.readonly_paths
                   if (spec.workspace / rel).exists()]
        mounts += list(spec.mounts)
        box = SandboxSpec(workspace=spec.workspace, private=private / "box", env=_env(spec), mounts=tuple(mounts),
                          relay_socket_dir=private / "relay", limits=spec.limits)
        argv = cli.argv(model=spec.model, tools=spec.tools, max_turns=spec.max_turns, effort=spec.effort,
                        mcp=spec.mcp, max_budget_usd=_cli_budget(spec),
                        tmp_mb=spec.limits.tmp_mb if spec.limits is not None else sandbox.SHM_MB)
        cred = spec.credential  # sent by the relay in the header the CLI would use for its variable
        with sandbox.Relay(spec.endpoint, cred.secret if cred else None, private / "relay", timeout_s=spec.timeout_s,
                           auth_header=cred.header if cred else "x-api-key", headers=spec.headers) as relay:
            finished = sandbox.run(box, argv, stdin=spec.prompt.encode(), timeout_s=spec.timeout_s,
                                   max_stdout=MAX_TRANSCRIPT_BYTES, cancel=spec.cancel)
            stalled_s, usage, served = relay.stalled_s(), dict(relay.usage), sorted(relay.models)
            api_failed = relay.api_failed()
    record.update(process_state=finished.state, returncode=finished.returncode, wall_s=round(finished.wall_s, 3),
                  stderr_tail=redact_text(finished.stderr_tail.decode(errors="replace")[-TAIL:], secrets))
    api_failed = blame(finished.state, api_failed, stalled_s, spec.timeout_s)
    try:
        return _outcome(spec, record, finished, usage, served, api_failed, secrets)
    except Exception as e:  # noqa: BLE001 - what the session left broke the reader: the agent's doing, at its cost
        detail = f"the harness could not read what the session left: {type(e).__name__}: {e}"
        return _stopped(spec, record, finished, usage, served, "session-error" if api_failed else "session-failed",
                        f"{detail}; {api_failed}" if api_failed else detail, secrets)


def _outcome(spec: SessionSpec, record: dict[str, Any], finished: sandbox.Finished, usage: dict[str, int],
             served: list[str], api_failed: str | None, secrets: tuple[str, ...]) -> dict[str, Any]:
    """The session's error kind (docs/formats.md, the missing-data rule): `session-error` (excluded) only when the
    relay shows the API failed; anything else that went wrong, the agent may have caused (`session-failed`, a
    measured failure at the cost the CLI or the relay counted)."""
    if finished.state == "spawn-failure":
        if not spec.after_agent:  # nothing of an agent has run in this workspace: the host failed
            return _failure("infra-error", f"could not start the sandbox: {record['stderr_tail']}", record)
        return _stopped(spec, record, finished, usage, served, "session-failed",
                        f"could not start the sandbox after an earlier session's agent ran on this host, which may "
                        f"have exhausted what a start needs: {record['stderr_tail']}", secrets)
    if finished.state in ("timeout", "limit", "cancelled"):  # stopped: what it spent is still measured
        if finished.state == "cancelled":
            kind, detail = "cancelled", f"session cancelled after {finished.wall_s:.0f}s"
        elif finished.state == "timeout" and api_failed:
            kind, detail = "session-error", f"session timed out after {finished.wall_s:.0f}s: {api_failed}"
        else:  # a limit, or a timeout while the endpoint answered (a failed answer or not): its own doing
            kind = "cell-limit"
            detail = f"session stopped: {finished.limit or f'the session ran out of its {spec.timeout_s:.0f}s'}"
        return _stopped(spec, record, finished, usage, served, kind, detail, secrets)
    kind = "session-error" if api_failed else "session-failed"
    blame = api_failed or "the relay saw no failed answer from the model endpoint"
    if finished.stdout_truncated:
        return _stopped(spec, record, finished, usage, served, kind,
                        f"the session's stream exceeded {MAX_TRANSCRIPT_BYTES} bytes; {blame}", secrets)
    try:
        parsed = stream.parse(finished.stdout)
    except stream.StreamError as e:
        detail = f"unreadable session stream: {e}; exit {finished.returncode}; {blame}; stderr: {record['stderr_tail']}"
        return _stopped(spec, record, finished, usage, served, kind, detail, secrets)

    cost = parsed.cost_usd if spec.prices is None else models.session_cost(parsed.result, spec.prices)
    record.update(cost_usd=cost, **parsed.usage, num_turns=parsed.num_turns, duration_s=parsed.duration_s,
                  session_id=parsed.session_id, tool_uses=parsed.tool_uses, served_models=parsed.served_models)
    try:
        data = transcript.render(parsed.events, secrets)
    except RecursionError:
        return _stopped(spec, record, finished, usage, served, kind,
                        f"the session's stream holds an event nested too deep to store; {blame}", secrets)
    try:
        record["transcript"] = transcript.write(data, spec.transcript_dir,
                                                f"{spec.transcript_name}-{parsed.session_id}.jsonl")
    except OSError as e:
        return _failure("evidence-unverified", f"could not store the transcript: {e}", record)
    record["skills_loaded"] = parsed.skills_loaded
    record["skill_invoked"] = arms.skill_invoked(spec.expected_skill, parsed.skills_loaded)
    if parsed.result.get("subtype") == "error_max_budget_usd":
        return _failure("cost-cap", f"the session reached the cell's cost cap (${spec.max_budget_usd} left of it) "
                        "and the CLI stopped it", record)
    if finished.returncode != 0 or not parsed.succeeded:
        r = parsed.result
        text = str(r.get("result") or r.get("errors") or "")[:300]
        detail = (f"CLI reported an error (subtype {r.get('subtype')}, is_error {r.get('is_error')}, "
                  f"exit {finished.returncode}, api status {r.get('api_error_status')}): {text}; {blame}")
        return _failure(kind, redact_text(detail, secrets), record)
    if arms.must_load(spec.expected_skill) and not record["skill_invoked"]:
        return _failure("skill-not-invoked", f"no successful Skill call for {spec.expected_skill!r}", record)
    record["ok"] = True
    return record
