"""Hidden oracle for ledger-discount-tax: tax after discount; never a negative taxable amount or total."""
# skillevo-oracle-canary: 42a2bcf2a44bb9e3d1ecc932d1d21ab3

from decimal import Decimal

import pytest

from ledger import FixedOff, Invoice, PercentOff  # imported by the hidden oracle


def _invoice(discount, tax_rate, *prices):
    inv = Invoice("INV-T", discount=discount, tax_rate=Decimal(tax_rate))
    for n, price in enumerate(prices):
        inv.add(f"item {n}", 1, price)
    return inv


def test_the_reported_invoice():
    inv = _invoice(FixedOff(Decimal("50")), "0.10", "200")
    assert (inv.subtotal, inv.tax, inv.total) == (Decimal("200.00"), Decimal("15.00"), Decimal("165.00"))
    assert inv.render().endswith("Discount: -$50.00\nTax: $15.00\nTotal: $165.00")


def test_percent_discount():
    inv = _invoice(PercentOff(Decimal("25")), "0.20", "50", "30")
    assert inv.tax == Decimal("12.00")
    assert inv.total == Decimal("72.00")


def test_no_discount_is_unchanged():
    inv = _invoice(None, "0.20", "17.50")
    assert inv.tax == Decimal("3.50")
    assert inv.total == Decimal("21.00")


def test_tax_rounds_half_up_on_the_discounted_amount():
    inv = _invoice(FixedOff(Decimal("0.01")), "0.075", "33.34")
    assert inv.tax == Decimal("2.50")
    assert inv.total == Decimal("35.83")


@pytest.mark.parametrize("discount", [FixedOff(Decimal("200")), FixedOff(Decimal("300")), PercentOff(100)])
def test_discount_up_to_or_beyond_the_subtotal_gives_zero(discount):
    inv = _invoice(discount, "0.10", "150", "50")
    assert inv.tax == Decimal("0")
    assert inv.total == Decimal("0")
    assert inv.tax >= 0 and inv.total >= 0
    assert inv.render().endswith("Tax: $0.00\nTotal: $0.00")


def test_zero_subtotal_with_a_discount():
    inv = _invoice(FixedOff(Decimal("10")), "0.25")
    assert inv.total == Decimal("0")
    assert inv.tax == Decimal("0")
