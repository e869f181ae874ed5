from textstats.tokenize import sentences, words


def test_words_keep_inner_apostrophes():
    assert words("Don't stop, Rosa's 2 cats!") == ["Don't", "stop", "Rosa's", "2", "cats"]


def test_sentences_split_on_terminal_punctuation():
    assert sentences("One. Two! Three? Four") == ["One", "Two", "Three", "Four"]


def test_sentences_of_blank_text():
    assert sentences("") == []
    assert sentences("  ...  ") == []
