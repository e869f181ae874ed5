"""Readability: syllable estimates and the Flesch reading-ease score."""

from __future__ import annotations

import re

from textstats.counts import average_sentence_length
from textstats.tokenize import words

_VOWEL_GROUPS = re.compile(r"[aeiouy]+")


def syllables(word: str) -> int:
    """Estimated syllables in one English word (at least 1)."""
    w = word.lower().strip("'")
    if not w:
        return 0
    count = len(_VOWEL_GROUPS.findall(w))
    if w.endswith("e") and not w.endswith(("le", "ee")) and count > 1:
        count -= 1  # silent final e: "make", "there"
    return max(1, count)


def flesch_reading_ease(text: str) -> float:
    """Flesch reading ease, rounded to 2 places: higher is easier, 60-70 is plain English.

    206.835 - 1.015 * (words per sentence) - 84.6 * (syllables per word); 0.0 for text without words.
    """
    ws = words(text)
    if not ws:
        return 0.0
    per_word = sum(syllables(w) for w in ws) / len(ws)
    return round(206.835 - 1.015 * average_sentence_length(text) - 84.6 * per_word, 2)
