"""A one-call summary of a text."""

from __future__ import annotations

from textstats.counts import (
    average_sentence_length,
    average_word_length,
    char_count,
    sentence_count,
    top_words,
    word_count,
)
from textstats.readability import flesch_reading_ease


def summary(text: str, *, top: int = 5) -> dict[str, object]:
    """Counts, averages (rounded to 2 places), reading ease and the `top` most frequent words."""
    return {
        "characters": char_count(text),
        "words": word_count(text),
        "sentences": sentence_count(text),
        "average_word_length": round(average_word_length(text), 2),
        "average_sentence_length": round(average_sentence_length(text), 2),
        "reading_ease": flesch_reading_ease(text),
        "top_words": top_words(text, top),
    }


def format_summary(stats: dict[str, object]) -> str:
    """`summary()` output as aligned `name: value` lines."""
    width = max(len(k) for k in stats)
    return "\n".join(f"{k.ljust(width)}: {v}" for k, v in stats.items())
