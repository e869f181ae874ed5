"""Agent sessions: the pinned Claude Code CLI, run headless inside the sandbox (see session.py)."""

from skillevo.agent.cli import CLIMissing
from skillevo.agent.session import SessionSpec, run_session

__all__ = ["CLIMissing", "SessionSpec", "run_session"]
