from decimal import Decimal

import pytest

from ledger import Invoice, LineItem, PercentOff


def test_totals_without_discount():
    inv = Invoice("INV-1", tax_rate=Decimal("0.20"))
    inv.add("Widget", 3, "2.50")
    inv.add("Gadget", 1, "10")
    assert inv.subtotal == Decimal("17.50")
    assert inv.tax == Decimal("3.50")
    assert inv.total == Decimal("21.00")


def test_render_lists_items_and_total():
    inv = Invoice("INV-2")
    inv.add("Consulting", 2, "1500")
    text = inv.render()
    assert text.splitlines()[0] == "Invoice INV-2"
    assert "2 x Consulting @ $1,500.00 = $3,000.00" in text
    assert text.endswith("Total: $3,000.00")


def test_line_items_are_validated():
    with pytest.raises(ValueError):
        LineItem("Widget", -1, Decimal("1"))
    with pytest.raises(ValueError):
        PercentOff(Decimal("120"))
