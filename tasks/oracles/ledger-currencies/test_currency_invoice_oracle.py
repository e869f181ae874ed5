"""Hidden oracle for ledger-currencies: Invoice.currency and render()."""
# skillevo-oracle-canary: bb201782ccf9391d63c9566a91ea5232

from decimal import Decimal

import pytest

from ledger import FixedOff, Invoice  # imported by the hidden oracle


def test_every_amount_in_the_invoice_currency():
    inv = Invoice("INV-20", discount=FixedOff(Decimal("5")), tax_rate=Decimal("0.10"), currency="GBP")
    inv.add("Widget", 2, "1500")
    lines = inv.render().splitlines()
    assert lines[1] == "  2 x Widget @ £1,500.00 = £3,000.00"
    assert "Subtotal: £3,000.00" in lines
    assert "Discount: -£5.00" in lines
    assert lines[-1].startswith("Total: £")
    assert "$" not in inv.render()


def test_default_currency_is_unchanged():
    inv = Invoice("INV-21")
    inv.add("Widget", 1, "10")
    assert inv.currency == "USD"
    assert inv.render().endswith("Total: $10.00")


def test_euro_invoice():
    inv = Invoice("INV-22", currency="EUR")
    inv.add("Gadget", 3, "0.5")
    assert inv.render().endswith("Tax: €0.00\nTotal: €1.50")


def test_unknown_currency_fails_when_rendering():
    inv = Invoice("INV-23", currency="ABC")
    inv.add("Widget", 1, "10")
    with pytest.raises(ValueError):
        inv.render()
