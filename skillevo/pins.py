"""Versions of outside tools that results depend on, and the model ids that tool knows, pinned in one place.

The Makefile and the Dockerfile read CLAUDE_CODE_VERSION from this file, so a bump here is the only
change needed to move every environment to a new CLI. MODEL_IDS is what that CLI's own model catalog and
deprecation table say (read from the 2.1.332 binary); bump both together.
"""

CLAUDE_CODE_VERSION = "2.1.332"
CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"

# short id -> (snapshot id the Anthropic API serves for it, first-party retirement date or None, remapped).
# "remapped": the pinned CLI silently runs another model for this id ("now runs as the latest Opus").
MODEL_IDS: dict[str, tuple[str, str | None, bool]] = {
    "claude-3-opus": ("claude-3-opus-20240229", "2026-01-05", False),
    "claude-3-5-haiku": ("claude-3-5-haiku-20241022", "2026-02-19", False),
    "claude-3-5-sonnet": ("claude-3-5-sonnet-20241022", "2025-10-28", False),
    "claude-3-7-sonnet": ("claude-3-7-sonnet-20250219", "2026-02-19", False),
    "claude-haiku-4-5": ("claude-haiku-4-5-20251001", None, False),
    "claude-haiku-5-5": ("claude-haiku-5-5", None, False),
    "claude-sonnet-4-0": ("claude-sonnet-4-20250514", "2026-06-15", False),
    "claude-sonnet-4-5": ("claude-sonnet-4-5-20250929", "2026-11-30", False),
    "claude-sonnet-4-6": ("claude-sonnet-4-6", None, False),
    "claude-sonnet-5": ("claude-sonnet-5", None, False),
    "claude-sonnet-5-5": ("claude-sonnet-5-5", None, False),
    "claude-opus-4-0": ("claude-opus-4-20250514", "2026-06-15", True),
    "claude-opus-4-1": ("claude-opus-4-1-20250805", None, True),
    "claude-opus-4-5": ("claude-opus-4-5-20251101", "2027-01-22", False),
    "claude-opus-4-6": ("claude-opus-4-6", None, False),
    "claude-opus-4-7": ("claude-opus-4-7", None, False),
    "claude-opus-4-8": ("claude-opus-4-8", None, False),
    "claude-opus-5": ("claude-opus-5", None, False),
    "claude-opus-5-5": ("claude-opus-5-5", None, False),
    "claude-fable-5": ("claude-fable-5", None, False),
    "claude-fable-5-1": ("claude-fable-5-1", None, False),
    "claude-fable-5-2": ("claude-fable-5-2", None, False),
    "claude-mythos-5": ("claude-mythos-5", None, False),
    "claude-mythos-5-1": ("claude-mythos-5-1", None, False),
    "claude-mythos-5-2": ("claude-mythos-5-2", None, False),
}
# Names the pinned CLI resolves to whatever is newest (its `aliases`, `best`, the model picker's entries).
FLOATING_ALIASES = frozenset({"opus", "sonnet", "haiku", "fable", "mythos", "best", "default", "opusplan"})
