from textstats.counts import average_word_length, char_count, top_words, word_count, word_frequencies


def test_word_and_char_counts():
    assert word_count("the cat sat") == 3
    assert char_count("a b c") == 5
    assert char_count("a b c", spaces=False) == 3


def test_frequencies_ignore_case():
    assert word_frequencies("The the THE cat")["the"] == 3


def test_top_words_breaks_ties_alphabetically():
    assert top_words("b a b a c", 2) == [("a", 2), ("b", 2)]


def test_average_word_length():
    assert average_word_length("ab abcd") == 3.0
    assert average_word_length("") == 0.0
