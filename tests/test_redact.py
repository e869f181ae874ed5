from skillevo.core.redact import REDACTED, redact_obj, redact_text


def test_patterns_and_literals_are_redacted():
    text = ("x-api-key: abcdef123456 Authorization: Bearer abc.def-ghi_jkl123 sk-ant-api03-AAAAAAAAAAAA "
            "ghp_" + "a" * 36 + " https://bob:hunter2@host/x literal-secret-99")
    out = redact_text(text, ["literal-secret-99"])
    for secret in ("abcdef123456", "abc.def-ghi_jkl123", "sk-ant-api03", "ghp_", "hunter2", "literal-secret-99"):
        assert secret not in out
    assert "https://[REDACTED]@host/x" in out


def test_structured_values_are_redacted_by_key_name():
    obj = {"headers": {"x-api-key": "anything", "Cookie": "c=1"}, "usage": {"input_tokens": 5},
           "list": ["sk-ant-xxxxxxxxxxxx"]}
    out = redact_obj(obj)
    assert out["headers"] == {"x-api-key": REDACTED, "Cookie": REDACTED}
    assert out["usage"] == {"input_tokens": 5}
    assert out["list"] == [REDACTED]


def test_plain_text_is_untouched():
    assert redact_text("tokens: 12, the key idea is simple") == "tokens: 12, the key idea is simple"
