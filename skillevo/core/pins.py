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
# USD per million tokens: (input, output, 5-minute cache write, cache read), the pinned CLI's pricing tiers.
PRICE_TIERS: dict[str, tuple[float, float, float, float]] = {
    "tier_2_10": (2, 10, 2.5, 0.2),
    "tier_2_10_cache_read_0_10": (2, 10, 2.5, 0.1),
    "tier_3_15": (3, 15, 3.75, 0.3),
    "tier_5_25": (5, 25, 6.25, 0.5),
    "tier_15_75": (15, 75, 18.75, 1.5),
    "tier_10_50": (10, 50, 12.5, 1),
    "tier_10_50_cache_read_0_25": (10, 50, 12.5, 0.25),
    "tier_4_20_cache_read_0_20": (4, 20, 5, 0.2),
    "tier_8_40_cache_read_0_20": (8, 40, 10, 0.2),
    "haiku_35": (0.8, 4, 1, 0.08),
    "haiku_45": (1, 5, 1.25, 0.1),
    "haiku_55": (0.1, 0.5, 0.125, 0.01),
}
MODEL_PRICES: dict[str, str] = {  # short id -> its pricing tier in the pinned CLI's catalog
    "claude-3-5-haiku": "haiku_35", "claude-haiku-4-5": "haiku_45", "claude-haiku-5-5": "haiku_55",
    "claude-3-5-sonnet": "tier_3_15", "claude-3-7-sonnet": "tier_3_15", "claude-sonnet-4-0": "tier_3_15",
    "claude-sonnet-4-5": "tier_3_15", "claude-sonnet-4-6": "tier_3_15", "claude-sonnet-5": "tier_2_10",
    "claude-sonnet-5-5": "tier_2_10_cache_read_0_10", "claude-opus-4-0": "tier_15_75", "claude-opus-4-1": "tier_15_75",
    "claude-opus-4-5": "tier_5_25", "claude-opus-4-6": "tier_5_25", "claude-opus-4-7": "tier_5_25",
    "claude-opus-4-8": "tier_5_25", "claude-opus-5": "tier_5_25", "claude-opus-5-5": "tier_4_20_cache_read_0_20",
    "claude-fable-5": "tier_10_50", "claude-fable-5-1": "tier_10_50_cache_read_0_25",
    "claude-fable-5-2": "tier_8_40_cache_read_0_20", "claude-mythos-5": "tier_10_50",
    "claude-mythos-5-1": "tier_10_50_cache_read_0_25", "claude-mythos-5-2": "tier_8_40_cache_read_0_20",
}
# Names the pinned CLI resolves to whatever is newest (its `aliases`, `best`, the model picker's entries).
FLOATING_ALIASES = frozenset({"opus", "sonnet", "haiku", "fable", "mythos", "best", "default", "opusplan"})

# The LiteLLM proxy a gateway backend (model.backend openai or litellm) starts on loopback: the `gateway` extra
# installs exactly this version, and a run refuses any other (its Anthropic-to-OpenAI translation is measured).
LITELLM_VERSION = "1.108.7"

# OpenAI models a gateway backend prices without help: short id -> (the dated snapshot it stands for, USD per
# million tokens for input, cached input, output), OpenAI's published API prices (standard tier) for the pin. A
# model outside this table needs params model.prices; usage nobody priced is unmeasured, never free.
OPENAI_MODELS: dict[str, tuple[str, float, float, float]] = {
    "gpt-5": ("gpt-5-2025-08-07", 1.25, 0.125, 10.0),
    "gpt-5-mini": ("gpt-5-mini-2025-08-07", 0.25, 0.025, 2.0),
    "gpt-5-nano": ("gpt-5-nano-2025-08-07", 0.05, 0.005, 0.40),
    "gpt-4.1": ("gpt-4.1-2025-04-14", 2.0, 0.50, 8.0),
    "gpt-4.1-mini": ("gpt-4.1-mini-2025-04-14", 0.40, 0.10, 1.60),
    "gpt-4.1-nano": ("gpt-4.1-nano-2025-04-14", 0.10, 0.025, 0.40),
    "o4-mini": ("o4-mini-2025-04-16", 1.10, 0.275, 4.40),
}
# OpenAI's names that move to whatever is newest (`chatgpt-4o-latest`, `gpt-5-chat-latest`, the bare `gpt-4o`).
OPENAI_FLOATING = frozenset({"gpt-4o", "gpt-4o-mini", "o1", "o3", "o3-mini", "gpt-4", "gpt-4-turbo", "gpt-3.5-turbo"})
