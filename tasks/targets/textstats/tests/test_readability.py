from textstats.readability import flesch_reading_ease, syllables
from textstats.report import summary


def test_syllables():
    assert syllables("cat") == 1
    assert syllables("make") == 1
    assert syllables("table") == 2
    assert syllables("reading") == 2


def test_plain_sentence_is_easy():
    assert flesch_reading_ease("The cat sat on the mat.") > 90


def test_summary_fields():
    stats = summary("The cat sat. The dog ran.")
    assert stats["words"] == 6
    assert stats["sentences"] == 2
    assert stats["top_words"][0] == ("the", 2)
