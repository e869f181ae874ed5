"""Counting words, characters and sentences."""

from __future__ import annotations

from collections import Counter

from textstats.tokenize import sentences, words


def word_count(text: str) -> int:
    """Number of words in `text`."""
    return len(words(text))


def char_count(text: str, *, spaces: bool = True) -> int:
    """Number of characters in `text`; without whitespace when `spaces` is false."""
    if spaces:
        return len(text)
    return sum(1 for ch in text if not ch.isspace())


def sentence_count(text: str) -> int:
    """Number of sentences in `text`."""
    return len(sentences(text))


def word_frequencies(text: str) -> Counter[str]:
    """How often each word occurs, ignoring case."""
    return Counter(w.lower() for w in words(text))


def top_words(text: str, n: int = 10) -> list[tuple[str, int]]:
    """The `n` most frequent words (lower case) with their counts; ties in alphabetical order."""
    ranked = sorted(word_frequencies(text).items(), key=lambda kv: (-kv[1], kv[0]))
    return ranked[:n]


def average_word_length(text: str) -> float:
    """Mean number of characters per word; 0.0 when there are no words."""
    ws = words(text)
    if not ws:
        return 0.0
    return sum(len(w) for w in ws) / len(ws)


def average_sentence_length(text: str) -> float:
    """Mean number of words per sentence."""
    return len(words(text)) / max(1, text.count("."))
