"""Versions of outside tools that results depend on, pinned in one place.

The Makefile and the Dockerfile read CLAUDE_CODE_VERSION from this file, so a bump here is the only
change needed to move every environment to a new CLI.
"""

CLAUDE_CODE_VERSION = "2.1.332"
CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
