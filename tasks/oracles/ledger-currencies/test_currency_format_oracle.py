"""Hidden oracle for ledger-currencies: format_money(amount, currency)."""
# skillevo-oracle-canary: a179beddedc294829c3e3f3c65f8e06d

from decimal import Decimal

import pytest

from ledger.money import format_money  # imported by the hidden oracle


@pytest.mark.parametrize("amount, currency, expected", [
    (Decimal("1234.5"), "EUR", "€1,234.50"),
    (Decimal("1234567.891"), "GBP", "£1,234,567.89"),
    (Decimal("7"), "USD", "$7.00"),
    ("0.005", "EUR", "€0.01"),
    (0, "GBP", "£0.00"),
])
def test_symbols_and_rounding(amount, currency, expected):
    assert format_money(amount, currency) == expected


def test_default_is_dollars():
    assert format_money(Decimal("1234.5")) == "$1,234.50"


@pytest.mark.parametrize("amount, currency, expected", [
    (Decimal("-12.5"), "EUR", "-€12.50"),
    (Decimal("-1234.567"), "USD", "-$1,234.57"),
    ("-0.01", "GBP", "-£0.01"),
])
def test_negative_amounts_put_the_sign_before_the_symbol(amount, currency, expected):
    assert format_money(amount, currency) == expected


@pytest.mark.parametrize("amount", ["-0.004", "-0.00", Decimal("-0")])
def test_amounts_that_round_to_zero_are_not_negative(amount):
    assert format_money(amount, "EUR") == "€0.00"
    assert format_money(amount) == "$0.00"


@pytest.mark.parametrize("currency", ["JPY", "XYZ", ""])
def test_unknown_currency_is_a_value_error(currency):
    with pytest.raises(ValueError):
        format_money(Decimal("1"), currency)
