"""Invoice line items."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from ledger.money import to_money


@dataclass(frozen=True)
class LineItem:
    description: str
    quantity: int
    unit_price: Decimal

    def __post_init__(self) -> None:
        if not isinstance(self.quantity, int) or self.quantity < 0:
            raise ValueError(f"quantity must be a non-negative int, got {self.quantity!r}")
        object.__setattr__(self, "unit_price", to_money(self.unit_price))
        if self.unit_price < 0:
            raise ValueError(f"unit price must not be negative, got {self.unit_price}")

    @property
    def total(self) -> Decimal:
        return to_money(self.unit_price * self.quantity)
