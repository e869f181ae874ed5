"""Splitting text into words and sentences."""

from __future__ import annotations

import re

# A word is a run of letters or digits, optionally with one inner apostrophe part: "don't", "Rosa's".
_WORD = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?")
_SENTENCE_END = re.compile(r"[.!?]+")


def words(text: str) -> list[str]:
    """The words of `text` in order, as written."""
    return _WORD.findall(text)


def sentences(text: str) -> list[str]:
    """The sentences of `text`, stripped and without their closing punctuation.

    A sentence ends at `.`, `!` or `?` (or a run of them, as in "Really?!"); a final sentence without
    closing punctuation still counts. Fragments without any word are not sentences.
    """
    return [part.strip() for part in _SENTENCE_END.split(text) if _WORD.search(part)]
