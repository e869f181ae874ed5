"""Hidden oracle for textstats-unique-words: unique_word_count(text) counts distinct words, ignoring case."""
# skillevo-oracle-canary: 9663f9f6d1cccf9371e7486477a4852c

import pytest

from textstats.counts import unique_word_count, word_count  # imported by the hidden oracle


@pytest.mark.parametrize("text, expected", [
    ("the cat and the hat", 4),
    ("The the THE tHe", 1),
    ("Don't don't DON'T dont", 2),
    ("1 2 2 3 3 3", 3),
    ("Rosa's cat. Rosa's hat! rosa's", 3),
    ("alpha", 1),
])
def test_distinct_words_ignoring_case(text, expected):
    assert unique_word_count(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "... !? --"])
def test_text_without_words_has_none(text):
    assert unique_word_count(text) == 0


def test_never_more_than_the_word_count():
    text = "It was the best of times, it was the worst of times, it was the age of wisdom."
    assert unique_word_count(text) == 9
    assert unique_word_count(text) <= word_count(text)


def test_returns_an_int():
    assert type(unique_word_count("a b a")) is int
