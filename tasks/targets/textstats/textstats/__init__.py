"""Text statistics: words and sentences, counts, readability, and a one-call summary."""

from textstats.counts import (
    average_sentence_length,
    average_word_length,
    char_count,
    sentence_count,
    top_words,
    word_count,
    word_frequencies,
)
from textstats.readability import flesch_reading_ease, syllables
from textstats.report import summary
from textstats.tokenize import sentences, words

__all__ = [
    "average_sentence_length",
    "average_word_length",
    "char_count",
    "flesch_reading_ease",
    "sentence_count",
    "sentences",
    "summary",
    "syllables",
    "top_words",
    "word_count",
    "word_frequencies",
    "words",
]
