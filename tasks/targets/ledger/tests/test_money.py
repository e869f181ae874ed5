from decimal import Decimal

import pytest

from ledger.money import format_money, to_money


def test_to_money_rounds_half_up():
    assert to_money("2.345") == Decimal("2.35")
    assert to_money(3) == Decimal("3.00")


def test_floats_are_refused():
    with pytest.raises(TypeError):
        to_money(0.1)


def test_format_money_uses_thousands_separators():
    assert format_money(Decimal("1234.5")) == "$1,234.50"
    assert format_money(0) == "$0.00"
