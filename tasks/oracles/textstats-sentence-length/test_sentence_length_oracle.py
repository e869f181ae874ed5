"""Hidden oracle for textstats-sentence-length: averages follow tokenize.sentences; no-sentence text gives 0.0."""
# skillevo-oracle-canary: 2135aa3b20d7c0ec3a3236b5ad806d95

import pytest

from textstats.counts import average_sentence_length  # imported by the hidden oracle
from textstats.readability import flesch_reading_ease, syllables  # imported by the hidden oracle
from textstats.report import summary  # imported by the hidden oracle
from textstats.tokenize import words  # imported by the hidden oracle


@pytest.mark.parametrize("text, expected", [
    ("Wait! Really? Yes.", 1.0),
    ("The cat sat. The dog ran.", 3.0),
    ("Really?! Yes... Fine", 1.0),
    ("One two. Three four five", 2.5),
    ("no punctuation at all here", 5.0),
])
def test_average_sentence_length_uses_real_sentences(text, expected):
    assert average_sentence_length(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "   ", "\n\n", "...", "?!", " . ! "])
def test_no_sentences_gives_zero(text):
    assert average_sentence_length(text) == 0.0
    assert flesch_reading_ease(text) == 0.0


@pytest.mark.parametrize("text", ["", "  \n ", "?!..."])
def test_summary_of_text_without_sentences(text):
    stats = summary(text)
    assert stats["words"] == 0
    assert stats["sentences"] == 0
    assert stats["average_sentence_length"] == 0.0
    assert stats["average_word_length"] == 0.0
    assert stats["reading_ease"] == 0.0
    assert stats["top_words"] == []


def test_reading_ease_of_dialogue():
    text = "Wait! Really? Yes."
    ws = words(text)
    expected = 206.835 - 1.015 * (len(ws) / 3) - 84.6 * (sum(syllables(w) for w in ws) / len(ws))
    assert flesch_reading_ease(text) == pytest.approx(round(expected, 2))
    assert summary(text)["sentences"] == 3
    assert summary(text)["average_sentence_length"] == 1.0
