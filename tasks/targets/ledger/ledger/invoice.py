"""Invoices: totals and a plain-text rendering."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from ledger.discounts import FixedOff, PercentOff
from ledger.items import LineItem
from ledger.money import ZERO, format_money, to_money


@dataclass
class Invoice:
    number: str
    items: list[LineItem] = field(default_factory=list)
    discount: PercentOff | FixedOff | None = None
    tax_rate: Decimal = Decimal("0")

    def fmt(self, amount: Decimal) -> str:
        return format_money(amount)

    def add(self, description: str, quantity: int, unit_price: Decimal | str) -> LineItem:
        item = LineItem(description, quantity, Decimal(unit_price))
        self.items.append(item)
        return item

    @property
    def subtotal(self) -> Decimal:
        return to_money(sum((item.total for item in self.items), ZERO))

    @property
    def discount_amount(self) -> Decimal:
        return self.discount.amount_off(self.subtotal) if self.discount else ZERO

    @property
    def tax(self) -> Decimal:
        return to_money(self.subtotal * Decimal(self.tax_rate))

    @property
    def total(self) -> Decimal:
        return self.subtotal - self.discount_amount + self.tax

    def render(self) -> str:
        lines = [f"Invoice {self.number}"]
        for item in self.items:
            lines.append(f"  {item.quantity} x {item.description} @ {self.fmt(item.unit_price)}"
                         f" = {self.fmt(item.total)}")
        lines.append(f"Subtotal: {self.fmt(self.subtotal)}")
        if self.discount_amount:
            lines.append(f"Discount: -{self.fmt(self.discount_amount)}")
        lines.append(f"Tax: {self.fmt(self.tax)}")
        lines.append(f"Total: {self.fmt(self.total)}")
        return "\n".join(lines)
